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
import { forward, forwardJson, type ForwardRequest } from '../proxy/forward.ts';
import { ClientGone } from '../proxy/scope.ts';
import { usageOf, type Usage } from '../proxy/sse.ts';
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
  /** Name the answering catalog model in the body's `model` (Olympus: the engine names its own). */
  renameModel?: boolean;
  /** Not charged to the account (Olympus's own embedding calls): no reservation, no usage row. */
  unbilled?: true;
}

/** What Olympus ranks a catalog model by, as this API replica sees it now. */
export interface ModelState {
  /** now() value until which every backend of the model is cooling down after a 429 or 5xx. */
  coolingUntil?: number;
  /** A backend is ready without waking (external URLs always are; a platform pool with a ready replica). */
  warm: boolean;
  /** Mean duration of recent non-streamed calls (exponentially weighted); unknown until one is made. */
  latencyMs?: number;
}

export interface ElasticCaller {
  /** Answers one call on `res` (or throws an ApiError while nothing was sent). */
  call(c: ModelCall, res: Response): Promise<void>;
  /**
   * One non-streamed call, read whole (each step of a managed tool loop): the same reservation,
   * fallbacks and settlement as call(); the body and the catalog model that answered.
   */
  complete(c: ModelCall): Promise<{ model: CatalogModel; body: Record<string, unknown> }>;
  /**
   * Olympus's embedding call: `inputs` embedded by the catalog embedding model `model` through the
   * same backends, fallbacks and cool-downs as /api/embeddings, not charged. One vector per input,
   * in order; throws (an ApiError, or the signal's reason) when no backend answered.
   */
  embed(e: {
    model: CatalogModel;
    inputs: string[];
    requestId: string;
    signal: AbortSignal;
  }): Promise<number[][]>;
  state(m: CatalogModel): ModelState;
  /** The clock of coolingUntil. */
  now(): number;
}

function maxTokens(body: Record<string, unknown>): number | undefined {
  for (const k of ['max_tokens', 'max_completion_tokens', 'max_output_tokens']) {
    const v = body[k];
    if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return v;
  }
  return undefined;
}

/** An EmbeddingResponse's vectors in input order; an answer of another shape is the engine's fault. */
function vectorsOf(body: Record<string, unknown>, count: number): number[][] {
  const data = body.data;
  const out: (number[] | undefined)[] = Array.from({ length: count }, () => undefined);
  if (Array.isArray(data) && data.length === count)
    for (const d of data as { index?: unknown; embedding?: unknown }[]) {
      const v = d?.embedding;
      if (
        typeof d?.index !== 'number' ||
        !Number.isInteger(d.index) ||
        d.index < 0 ||
        d.index >= count ||
        !Array.isArray(v) ||
        !v.every((x) => typeof x === 'number')
      )
        break;
      out[d.index] = v as number[];
    }
  if (out.some((v) => v === undefined))
    throw new ApiError('engine_unreachable', {
      message: 'The embedding model answered something other than one float vector per input',
    });
  return out as number[][];
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

  const latency = new Map<string, number>();
  const observe = (m: CatalogModel, ms: number) => {
    const prev = latency.get(m.name);
    latency.set(m.name, prev === undefined ? ms : prev * 0.8 + ms * 0.2);
  };

  /**
   * Reserves, tries each backend of the model and its fallbacks in order, and settles. `send` makes
   * one attempt; `sent` says whether the client already has bytes (then nothing is retried).
   * Undefined when the client went away.
   */
  const run = async <T>(
    c: ModelCall,
    sent: () => boolean,
    send: (m: CatalogModel, req: ForwardRequest, retries: number) => Promise<{ usage?: Usage; value: T }>,
  ): Promise<T | undefined> => {
    const bound = reservationBound({
      pricing: c.model.pricing,
      requestBytes: c.requestBytes,
      maxTokens: c.kinds.includes('embedding') ? 0 : maxTokens(c.body),
      ...(c.model.contextLength ? { contextLength: c.model.contextLength } : {}),
    });
    const reservation = c.unbilled
      ? { ok: true as const, hold: { settle: () => 0n, release() {} } }
      : await deps.wallet.reserve({ accountId: c.accountId, amount: bound, free: true });
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
          const started = now();
          const out = await send(
            m,
            {
              upstream: got.lease,
              method: 'POST',
              path: c.path,
              body: { ...c.body, model: got.model },
              requestId: c.requestId,
              signal: c.signal,
              ...(got.headers ? { headers: got.headers } : {}),
              ...(c.renameModel ? { renameModel: { from: got.model, to: m.name } } : {}),
            },
            got.retries,
          );
          if (c.body.stream !== true) observe(m, now() - started);
          settle(m, out.usage);
          return out.value;
        } catch (err) {
          if (sent() || !(err instanceof ApiError) || !retriable(err)) {
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
      if (err instanceof ClientGone) return undefined;
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
  };

  return {
    async call(c, res) {
      await run(
        c,
        () => res.headersSent,
        async (m, req, retries) => {
          res.setHeader(MODEL_HEADER, m.name);
          if (m !== c.model) res.setHeader(FALLBACK_HEADER, c.model.name);
          const usage = await forward(req, res, { dispatcher: deps.dispatcher, retries });
          return { ...(usage ? { usage } : {}), value: undefined };
        },
      );
    },
    async complete(c) {
      const body: Record<string, unknown> = { ...c.body, stream: false };
      delete body.stream_options;
      const out = await run(
        { ...c, body },
        () => false,
        async (m, req, retries) => {
          const answer = await forwardJson(req, { dispatcher: deps.dispatcher, retries });
          const usage = usageOf(answer);
          return { ...(usage ? { usage } : {}), value: { model: m, body: answer } };
        },
      );
      if (!out) throw new ClientGone();
      return out;
    },
    async embed(e) {
      const out = await run(
        {
          model: e.model,
          kinds: ['embedding'],
          path: '/embeddings',
          body: { input: e.inputs, encoding_format: 'float' },
          requestBytes: 0,
          accountId: '',
          keyId: '',
          requestId: e.requestId,
          signal: e.signal,
          unbilled: true,
        },
        () => false,
        async (_m, req, retries) => ({
          value: vectorsOf(await forwardJson(req, { dispatcher: deps.dispatcher, retries }), e.inputs.length),
        }),
      );
      if (!out) throw e.signal.reason ?? new ClientGone();
      return out;
    },
    state(m) {
      const t = now();
      let until: number | undefined;
      let warm = false;
      for (const b of m.backends) {
        const c = cooling.get(backendKey(b)) ?? 0;
        until = until === undefined ? c : Math.min(until, c);
        if (!('endpoint' in b)) warm = true;
        else if ((deps.platform?.endpoints.get(b.endpoint)?.status?.readyReplicas ?? 0) > 0) warm = true;
      }
      const ms = latency.get(m.name);
      return {
        ...(until !== undefined && until > t ? { coolingUntil: until } : {}),
        warm,
        ...(ms !== undefined ? { latencyMs: ms } : {}),
      };
    },
    now,
  };
}
