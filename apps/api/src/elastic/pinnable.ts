// What a key may pin (`pinnedModel`, used by /api/b/chat/completions): a catalog chat model, one of
// the account's own dedicated endpoints, or Olympus (`auto`). Checked when the key is written, so a
// pin that could never be called is refused naming the field rather than failing every call later.
import { isEndpointId } from '@berth/crds';
import type { EndpointCache } from '../dedicated/ports.ts';
import type { ElasticCatalog } from './catalog.ts';
import { RESERVED } from './entry.ts';

/** Why `model` cannot be pinned by the account, or undefined when it can. */
export function pinnedModelProblem(
  deps: { catalog: Pick<ElasticCatalog, 'get'>; endpoints?: Pick<EndpointCache, 'get'> },
  accountId: string,
  model: string,
): string | undefined {
  if (RESERVED.has(model)) return undefined;
  if (isEndpointId(model)) {
    const endpoint = deps.endpoints?.get(model);
    // Another account's endpoint is reported as unknown: a pin does not reveal what others own.
    return endpoint && endpoint.spec.account === accountId
      ? undefined
      : `no dedicated endpoint ${model} in this account`;
  }
  const m = deps.catalog.get(model);
  if (!m) return `no catalog model or dedicated endpoint named ${model} (GET /api/models lists the catalog)`;
  if (m.kind !== 'chat')
    return `${model} is ${m.kind === 'embedding' ? 'an embedding' : 'a completion'} model; /api/b/chat/completions needs a chat model`;
  return undefined;
}
