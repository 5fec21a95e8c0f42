// The front door's one decision: what kind of call is this? `model` names one of the caller's own
// dedicated endpoints (`endpt-…`), a catalog model by its display name, or asks Olympus to choose
// one (`auto`, `olympus`, `olympus-auto`); a catalog call whose `tools` name managed tools runs the
// managed tool loop. The OpenAI routes (./routes.ts) decide here and answer with ./answer.ts;
// Chronos chooses its steps' models with chooseCatalogModel, the same rule.
import { isEndpointId, type DedicatedEndpoint } from '@berth/crds';
import { ApiError } from '../platform/errors.ts';
import type { EndpointCache } from '../dedicated/ports.ts';
import type { ElasticCatalog } from '../elastic/catalog.ts';
import type { ElasticCaller } from '../elastic/call.ts';
import { KIND_NAME, type CatalogModel, type ModelKind } from '../elastic/entry.ts';
import {
  chooseModel,
  chosenModel,
  isOlympusModel,
  type OlympusChoice,
  type OlympusDeps,
} from '../olympus/choose.ts';
import type { ToolCaller } from '../tools/access.ts';
import { managedTools, type ManagedAsks } from '../tools/answer.ts';
import { childSpan, type Context } from '../platform/tracing.ts';

/** An OpenAI route of the front door: where it forwards, and the kinds of model it takes. */
export interface InferenceRoute {
  path: string;
  upstreamPath: string;
  kinds: readonly ModelKind[];
}

export type CallPlan =
  /** One of the caller's own dedicated endpoints; `body` names the model as asked. */
  | { kind: 'dedicated'; endpoint: DedicatedEndpoint; body: Record<string, unknown> }
  /** A catalog model (`olympus`: Olympus chose it, and why). */
  | { kind: 'catalog'; model: CatalogModel; olympus?: OlympusChoice }
  /** A catalog model with managed tools: the tool loop answers. */
  | { kind: 'managed'; model: CatalogModel; olympus?: OlympusChoice; asks: ManagedAsks };

export interface DecideDeps {
  catalog: Pick<ElasticCatalog, 'get' | 'list'>;
  /** Each catalog model's live state, read only (Olympus ranks by it). */
  live: Pick<ElasticCaller, 'state' | 'now'>;
  /** The dedicated endpoints (absent: no runtime; an `endpt-…` is an unknown model). */
  endpoints?: Pick<EndpointCache, 'get'>;
  /** Olympus's policies and routes (absent: `auto` is refused as olympus_not_enabled). */
  olympus?: Omit<OlympusDeps, 'catalog' | 'live'>;
  /** Whether managed tools are served (absent: a request naming them is refused). */
  managed: boolean;
}

/** What Olympus needs to know of a request, besides the caller. */
export interface ModelAsk {
  kinds: readonly ModelKind[];
  body: Record<string, unknown>;
  /** The body's size: the upper bound of the prompt in tokens, as billing reserves. */
  requestBytes: number;
  caller: ToolCaller;
  requestId: string;
  signal: AbortSignal;
  /** Told Olympus's choice as soon as it is made (the routes name it in x-berth-olympus-reason). */
  onChoice?: (choice: OlympusChoice) => void;
  /** The request's trace (platform/tracing.ts): Olympus's choice is a span of it. */
  trace?: Context;
}

export interface CallAsk extends Omit<ModelAsk, 'kinds'> {
  route: InferenceRoute;
  /** The model asked for: the key's pinned model on a pinned route, else the body's `model`. */
  name: unknown;
}

/** 404 `model_not_found` naming the model. */
export function modelNotFound(name: string): ApiError {
  return new ApiError('model_not_found', { message: `The model \`${name}\` does not exist`, param: 'model' });
}

/** The kind of call `ask` is, or the ApiError the caller sees. */
export async function decideCall(deps: DecideDeps, ask: CallAsk): Promise<CallPlan> {
  const { route, name } = ask;
  if (typeof name !== 'string' || !name)
    throw new ApiError('validation_error', {
      message: 'Invalid request body: model: must be a string',
      param: 'model',
    });
  if (isEndpointId(name)) {
    const endpoint = deps.endpoints?.get(name);
    if (!endpoint) throw modelNotFound(name);
    if (endpoint.spec.account !== ask.caller.accountId) throw new ApiError('endpoint_not_owned');
    if (route.upstreamPath !== '/chat/completions' && route.upstreamPath !== '/completions')
      throw new ApiError('validation_error', {
        message: `Dedicated endpoints serve chat and text completions, not ${route.path}`,
        param: 'model',
      });
    const body = name === ask.body.model ? ask.body : { ...ask.body, model: name };
    return { kind: 'dedicated', endpoint, body };
  }
  const found = await chooseCatalogModel(deps, name, { ...ask, kinds: route.kinds });
  if (!found) throw modelNotFound(name);
  const { model, olympus } = found;
  if (!route.kinds.includes(model.kind))
    throw new ApiError('validation_error', {
      message: `Model ${name} is ${KIND_NAME[model.kind]}; ${route.path} needs ${route.kinds.map((k) => KIND_NAME[k]).join(' or ')}`,
      param: 'model',
    });
  const asks =
    route.kinds.includes('chat') && route.path !== '/api/completions'
      ? managedTools(ask.body.tools)
      : undefined;
  if (!asks) return { kind: 'catalog', model, ...(olympus ? { olympus } : {}) };
  if (!deps.managed)
    throw new ApiError('unknown_tool', {
      message: 'Managed tools are not configured on this API',
      param: 'tools',
    });
  return { kind: 'managed', model, asks, ...(olympus ? { olympus } : {}) };
}

/**
 * The catalog model a name calls: the catalog's entry, or for `auto` (`olympus`, `olympus-auto`)
 * Olympus's choice — with Olympus's next choices after the model's own fallbacks. Undefined: no such
 * model. Olympus must be enabled for the account and allowed by the caller's tool pin.
 */
export async function chooseCatalogModel(
  deps: Pick<DecideDeps, 'catalog' | 'live' | 'olympus'>,
  name: string,
  ask: ModelAsk,
): Promise<{ model: CatalogModel; olympus?: OlympusChoice } | undefined> {
  if (!isOlympusModel(name)) {
    const model = deps.catalog.get(name);
    return model && { model };
  }
  if (!deps.olympus) throw new ApiError('olympus_not_enabled', { param: 'model' });
  const span = childSpan('berth.olympus.choose', ask.trace);
  let choice: OlympusChoice;
  try {
    choice = await chooseModel({ ...deps.olympus, catalog: deps.catalog, live: deps.live }, ask.caller, {
      kinds: ask.kinds,
      body: ask.body,
      requestBytes: ask.requestBytes,
      tools: Array.isArray(ask.body.tools) && ask.body.tools.length > 0,
      requestId: ask.requestId,
      signal: ask.signal,
    });
  } catch (err) {
    span?.end(err);
    throw err;
  }
  span?.set({
    'berth.catalog_model': choice.model.name,
    'berth.olympus.reason': choice.reason,
    'berth.olympus.objective': choice.objective,
    'berth.olympus.considered': choice.considered.length,
  });
  span?.end();
  ask.onChoice?.(choice);
  return { model: chosenModel(choice), olympus: choice };
}
