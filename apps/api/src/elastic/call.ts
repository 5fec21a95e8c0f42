// Calling a catalog model: the one function the Elastic routes (and later managed tools and
// Olympus) use. It resolves the display name to its backends, reserves the call's upper bound in the
// wallet before any upstream work (402 otherwise), forwards through the dedicated proxy's one path
// (forward(), platform endpoints woken and held by their Upstream), falls back on 429, 5xx and
// connection errors — to the model's next backend, then to the models of its fallback list, in
// order, backends that failed in the last ELASTIC_COOLDOWN_MS last — only before the first byte
// reached the client, and settles the exact usage (a stream cut short included) afterwards.
import type { Response } from 'express';
import type { Dispatcher } from 'undici';
import type { DedicatedEndpoint } from '@berth/crds';
import { callCost, reservationBound } from '../billing/money.ts';
import type { Wallet } from '../billing/wallet.ts';
import type { EndpointCache } from '../endpoints/ports.ts';
import { ApiError } from '../errors.ts';
import { forward } from '../proxy/forward.ts';
import { ClientGone } from '../proxy/scope.ts';
import type { Usage } from '../proxy/sse.ts';
import { affinityKey } from '../upstream/affinity.ts';
import type { Lease, Upstream } from '../upstream/types.ts';
import type { ElasticCatalog } from './catalog.ts';
import type { Backend, CatalogModel, ModelKind } from './entry.ts';

/** The header naming the catalog model that answered, and the one it fell back from. */
export const MODEL_HEADER = 'x-berth-model';
export const FALLBACK_HEADER = 'x-berth-fallback-from';
/** At most this many models are tried for one call (the requested one and its fallbacks). */
const MAX_MODELS = 8;

export interface ElasticDeps {
  catalog: ElasticCatalog;
  wallet: Wallet;
  dispatcher: Dispatcher;
  /** Platform endpoints as backends (absent when no runtime is configured). */
  platform?: { endpoints: EndpointCache; upstream: Upstream<DedicatedEndpoint> };
  config: { wakeHoldMs: number; retries: number; cooldownMs: number };
  /** Monotonic milliseconds (cool-downs). */
  now?: () => number;
}

export interface ModelCall {
  /** The display name asked for. */
  model: CatalogModel;
  /** The route's kinds: a model of another kind is skipped as a fallback. */
  kinds: readonly ModelKind[];
  /** Path under the backend's OpenAI base URL, e.g. `/chat/completions`. */
  path: string;
  body: Record<string, unknown>;
  requestBytes: number;
  accountId: string;
  keyId: string;
  requestId: string;
  signal: AbortSignal;
}

export interface ElasticCaller {
  /** Answers one call on `res` (or throws an ApiError while nothing was sent). */
  call(c: ModelCall, res: Response): Promise<void>;
}

function maxTokens(body: Record<string, unknown>): number | undefined {
  for (const k of ['max_tokens', 'max_completion_tokens', 'max_output_tokens']) {
    const v = body[k];
    if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return v;
  }
  return undefined;
}

/** The requested model, then its fallbacks depth-first, each once. */
function chain(catalog: ElasticCatalog, first: CatalogModel): CatalogModel[] {
  const out: CatalogModel[] = [];
  const seen = new Set<string>();
  const visit = (m: CatalogModel) => {
    if (seen.has(m.name) || out.length >= MAX_MODELS) return;
    seen.add(m.name);
    out.push(m);
    for (const f of m.fallbacks) {
      const next = catalog.get(f);
      if (next) visit(next);
    }
  };
  visit(first);
  return out;
}

/** Worth another backend: capacity, overload, engine down. Not: the engine refused the request. */
function retriable(err: ApiError): boolean {
  return err.status === 429 || err.status >= 500;
}

export function elasticCaller(deps: ElasticDeps): ElasticCaller {
  const now = deps.now ?? (() => performance.now());
  const cooling = new Map<string, number>();
  const backendKey = (b: Backend) => ('endpoint' in b ? b.endpoint : `${b.baseUrl}\u0000${b.model}`);

  /** A lease on one backend, and the model name it serves; or the refusal as an ApiError. */
  const acquire = async (
    b: Backend,
    signal: AbortSignal,
    key: number,
  ): Promise<{ lease: Lease; model: string; headers?: Record<string, string>; retries: number }> => {
    if (!('endpoint' in b)) {
      const lease: Lease = { next: () => b.baseUrl, release() {} };
      return {
        lease,
        model: b.model,
        ...(b.apiKey ? { headers: { authorization: `Bearer ${b.apiKey}` } } : {}),
        retries: 0,
      };
    }
    const endpoint = deps.platform?.endpoints.get(b.endpoint);
    if (!endpoint) throw new ApiError('service_unavailable');
    const acquired = await deps.platform!.upstream.acquire(endpoint, {
      hold: deps.config.wakeHoldMs,
      signal,
      key,
    });
    if (!acquired.ok) {
      if (acquired.reason === 'aborted') throw signal.reason;
      throw new ApiError('service_unavailable');
    }
    return { lease: acquired.lease, model: endpoint.spec.model.id, retries: deps.config.retries };
  };

  return {
    async call(c, res) {
      const bound = reservationBound({
        pricing: c.model.pricing,
        requestBytes: c.requestBytes,
        maxTokens: c.kinds.includes('embedding') ? 0 : maxTokens(c.body),
        ...(c.model.contextLength ? { contextLength: c.model.contextLength } : {}),
      });
      const reservation = await deps.wallet.reserve({ accountId: c.accountId, amount: bound, free: true });
      if (!reservation.ok) throw new ApiError('insufficient_balance');
      const hold = reservation.hold;
      let settled = false;
      const settle = (m: CatalogModel, usage: Usage | undefined) => {
        settled = true;
        const u = usage ?? { promptTokens: 0, completionTokens: 0 };
        hold.settle(callCost(m.pricing, u.promptTokens, u.completionTokens), {
          keyId: c.keyId,
          model: m.name,
          ...u,
        });
      };
      let last: ApiError | undefined;
      try {
        // Backends that failed recently go last rather than nowhere: when everything is cooling
        // down, trying is still better than refusing.
        const t = now();
        const candidates = chain(deps.catalog, c.model)
          .filter((m) => c.kinds.includes(m.kind))
          .flatMap((m) => m.backends.map((b) => ({ m, b, key: backendKey(b) })));
        const affinity = affinityKey(c.body);
        const cool = (key: string) => (cooling.get(key) ?? 0) > t;
        const ordered = [...candidates.filter((x) => !cool(x.key)), ...candidates.filter((x) => cool(x.key))];
        for (const { m, b, key } of ordered) {
          let lease: Lease | undefined;
          try {
            const got = await acquire(b, c.signal, affinity);
            lease = got.lease;
            res.setHeader(MODEL_HEADER, m.name);
            if (m !== c.model) res.setHeader(FALLBACK_HEADER, c.model.name);
            const usage = await forward(
              {
                upstream: got.lease,
                method: 'POST',
                path: c.path,
                body: { ...c.body, model: got.model },
                requestId: c.requestId,
                signal: c.signal,
                ...(got.headers ? { headers: got.headers } : {}),
              },
              res,
              { dispatcher: deps.dispatcher, retries: got.retries },
            );
            settle(m, usage);
            return;
          } catch (err) {
            if (res.headersSent || !(err instanceof ApiError) || !retriable(err)) {
              // The engine refused the request (4xx: another backend would too), or the call
              // ended without an answer (client gone, key revoked, wall clock while held).
              throw err;
            }
            cooling.set(key, now() + deps.config.cooldownMs);
            last = err;
          } finally {
            lease?.release();
          }
        }
      } catch (err) {
        if (!settled) hold.release();
        if (err instanceof ClientGone) return;
        throw err;
      }
      hold.release();
      if (last?.status === 429)
        throw new ApiError('rate_limited', {
          message: `Model ${c.model.name} is over capacity and no fallback could take the call; retry with backoff`,
          headers: { 'retry-after': '1' },
        });
      throw (
        last ??
        new ApiError('service_unavailable', {
          message: `Model ${c.model.name} has no backend available right now; retry with backoff`,
          headers: { 'retry-after': '5' },
        })
      );
    },
  };
}
