// Calling a catalog model: the one call path of the front door's catalog calls, the managed tool
// loop's model steps, Chronos's chat steps and Olympus's embeddings. It resolves the model to its
// backends, reserves the call's upper bound in the wallet before any upstream work (402 otherwise),
// forwards through the dedicated proxy's one path (forward(), platform endpoints woken and held by
// their Upstream), falls back on 429, 5xx and connection errors — to the model's next backend, then
// to the models of its fallback list, in order, backends that failed in the last ELASTIC_COOLDOWN_MS
// last — only before the first byte reached the client, and settles the exact usage (a stream cut
// short included) afterwards. A fallback never surprises the bill: it goes only to models priced at
// or below the one asked for, unless the key or the request opts in to dearer ones.
import type { Response } from 'express';
import type { Dispatcher } from 'undici';
import type { DedicatedEndpoint } from '@berth/crds';
import { callCost } from '../platform/money.ts';
import { refusalError } from '../billing/refusal.ts';
import type { Wallet } from '../billing/wallet.ts';
import type { EndpointCache } from '../dedicated/ports.ts';
import { ApiError } from '../platform/errors.ts';
import { forward, forwardJson, type ForwardRequest } from '../dedicated/proxy/forward.ts';
import { ClientGone } from '../dedicated/proxy/scope.ts';
import { usageOf, type Usage } from '../dedicated/proxy/sse.ts';
import { affinityKey } from '../dedicated/upstream/affinity.ts';
import type { Acquired, Lease, Upstream } from '../dedicated/upstream/types.ts';
import type { ElasticCatalog } from './catalog.ts';
import type { Backend, CatalogModel, ModelKind } from './entry.ts';
import { externalUpstream } from './external-upstream.ts';
import { callModels, DEARER_FALLBACK_FIELD, retriable } from './fallback-plan.ts';
import { withMember } from '../http/body-bytes.ts';
import { childSpan, endWith, tracing, type Context, type TraceSpan } from '../platform/tracing.ts';
import type { Reservation } from '../billing/wallet-account.ts';

/** The header naming the catalog model that answered, and the one it fell back from. */
export const MODEL_HEADER = 'x-berth-model';
export const FALLBACK_HEADER = 'x-berth-fallback-from';
export { DEARER_FALLBACK_FIELD, notDearer } from './fallback-plan.ts';

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
  /** Not charged to the account (Olympus's own embedding calls): no reservation, no usage row. */
  unbilled?: true;
  /** The key's setting: fallbacks may go to models dearer than `model` (the request may say otherwise). */
  allowDearerFallback?: boolean;
  /** The request's trace (platform/tracing.ts): reservation, each backend tried and settlement are spans. */
  trace?: Context;
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

/** One non-streamed call read whole: the answer, the catalog model that gave it, what it cost. */
export interface CompletedCall {
  model: CatalogModel;
  body: Record<string, unknown>;
  /** What the wallet charged for it, in micro-units (0 for a free query). */
  cost: bigint;
}

export interface ElasticCaller {
  /** Answers one call on `res` (or throws an ApiError while nothing was sent). */
  call(c: ModelCall, res: Response): Promise<void>;
  /**
   * One non-streamed call, read whole (each step of a managed tool loop): the same reservation,
   * fallbacks and settlement as call(); the body and the catalog model that answered.
   */
  complete(c: ModelCall): Promise<CompletedCall>;
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

/** A wallet reservation's span attributes: its outcome. */
/** The body without Berth's own opt-in member (DEARER_FALLBACK_FIELD), which no engine is sent. */
function withoutOptIn(body: Record<string, unknown>): Record<string, unknown> {
  const { [DEARER_FALLBACK_FIELD]: _optIn, ...rest } = body;
  return rest;
}

const reserved = (r: Reservation) => ({ 'berth.outcome': r.ok ? 'ok' : r.reason });

/** A wake's span attributes: its outcome, and how long the call was held. */
const woken = (a: Acquired) => ({
  'berth.outcome': a.ok ? 'ok' : a.reason,
  ...(a.ok && a.wake ? { 'berth.wake.held_ms': a.wake.heldMs } : {}),
});

/** One backend tried (tracing on): the model, which backend, its place in the fallback order. */
function backendSpan(parent: Context, m: CatalogModel, b: Backend, index: number, first: CatalogModel) {
  return tracing.span('berth.elastic.backend', parent, {
    'berth.catalog_model': m.name,
    'gen_ai.request.model': m.name,
    'berth.backend': 'endpoint' in b ? b.endpoint : 'external',
    ...('endpoint' in b
      ? { 'berth.endpoint.id': b.endpoint }
      : { 'server.address': new URL(b.baseUrl).host }),
    'berth.fallback': index,
    ...(m === first ? {} : { 'berth.fallback.from': first.name }),
  });
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
    span?: TraceSpan,
  ): Promise<{ lease: Lease; model: string; headers?: Record<string, string>; retries: number }> => {
    if (!('endpoint' in b)) {
      const acquired = await externalUpstream.acquire(b, { hold: 0, signal, key });
      if (!acquired.ok) throw new ApiError('service_unavailable');
      return {
        lease: acquired.lease,
        model: b.model,
        ...(b.apiKey ? { headers: { authorization: `Bearer ${b.apiKey}` } } : {}),
        retries: 0,
      };
    }
    const endpoint = deps.platform?.endpoints.get(b.endpoint);
    if (!endpoint) throw new ApiError('service_unavailable');
    // A platform endpoint that sleeps is woken and the call held: the wake is a span of the backend's.
    const phase = endpoint.status?.phase;
    const waking =
      span && (phase === 'hibernated' || phase === 'waking')
        ? childSpan('berth.wake', span.context, {
            'berth.endpoint.id': b.endpoint,
            'berth.wake.phase': phase,
            'berth.wake.hold_ms': deps.config.wakeHoldMs,
          })
        : undefined;
    const acquired = await endWith(
      waking,
      deps.platform!.upstream.acquire(endpoint, { hold: deps.config.wakeHoldMs, signal, key }),
      woken,
    );
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
  ): Promise<{ value: T; cost: bigint } | undefined> => {
    const { models, skipped, bound } = callModels(deps.catalog, c);
    const traced = tracing.enabled ? c.trace : undefined;
    const reservation = c.unbilled
      ? { ok: true as const, hold: { settle: () => 0n, release() {} } }
      : await endWith(
          traced && tracing.span('berth.wallet.reserve', traced),
          deps.wallet.reserve({ accountId: c.accountId, amount: bound, free: true, keyId: c.keyId }),
          reserved,
        );
    if (!reservation.ok) throw refusalError(reservation, deps.wallet.currency);
    const hold = reservation.hold;
    // The body as the client sent it (its bytes reused: withMember) unless it holds Berth's opt-in.
    const upstreamBody = Object.hasOwn(c.body, DEARER_FALLBACK_FIELD) ? withoutOptIn(c.body) : c.body;
    let settled = false;
    const settle = (m: CatalogModel, usage: Usage | undefined): bigint => {
      settled = true;
      const u = usage ?? { promptTokens: 0, completionTokens: 0 };
      const span = traced && tracing.span('berth.wallet.settle', traced, { 'berth.catalog_model': m.name });
      const cost = hold.settle(callCost(m.pricing, u.promptTokens, u.completionTokens), {
        keyId: c.keyId,
        model: m.name,
        ...u,
      });
      span?.set({
        'gen_ai.usage.input_tokens': u.promptTokens,
        'gen_ai.usage.output_tokens': u.completionTokens,
      });
      span?.end();
      return cost;
    };
    let last: ApiError | undefined;
    try {
      // Backends that failed recently go last rather than nowhere: when everything is cooling
      // down, trying is still better than refusing.
      const t = now();
      const candidates = models.flatMap((m) => m.backends.map((b) => ({ m, b, key: backendKey(b) })));
      const affinity = affinityKey(c.body);
      const cool = (key: string) => (cooling.get(key) ?? 0) > t;
      const ordered = [...candidates.filter((x) => !cool(x.key)), ...candidates.filter((x) => cool(x.key))];
      let tried = 0;
      for (const { m, b, key } of ordered) {
        let lease: Lease | undefined;
        const span: TraceSpan | undefined = traced && backendSpan(traced, m, b, tried++, c.model);
        try {
          const got = await acquire(b, c.signal, affinity, span);
          lease = got.lease;
          const started = now();
          const out = await send(
            m,
            {
              upstream: got.lease,
              method: 'POST',
              path: c.path,
              body: withMember(upstreamBody, 'model', got.model),
              requestId: c.requestId,
              signal: c.signal,
              ...(got.headers ? { headers: got.headers } : {}),
              ...(c.trace ? { trace: span ? span.context : c.trace } : {}),
              // One rule on every path (plain, fallback, Olympus, tools, Chronos): the answer's
              // `model` is the catalog model that answered, never a backend's own name.
              ...(c.unbilled ? {} : { renameModel: { from: got.model, to: m.name } }),
            },
            got.retries,
          );
          if (c.body.stream !== true) observe(m, now() - started);
          span?.set({ 'berth.outcome': 'ok' });
          span?.end();
          return { value: out.value, cost: settle(m, out.usage) };
        } catch (err) {
          span?.end(err);
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
    // Fallbacks left out for their price are named, with the way to allow them.
    const untried = skipped.length
      ? `; fallbacks priced above ${c.model.name} were not tried (${skipped.join(', ')}): send "${DEARER_FALLBACK_FIELD}": true, or allow it on the key, to use them`
      : '';
    if (last?.status === 429)
      throw new ApiError('rate_limited', {
        message: `Model ${c.model.name} is over capacity and no fallback could take the call${untried}; retry with backoff`,
        headers: { 'retry-after': '1' },
      });
    if (untried && last)
      throw new ApiError(last.code, {
        message: `${last.message}${untried}`,
        status: last.status,
        type: last.type,
        headers: last.headers,
      });
    throw (
      last ??
      new ApiError('service_unavailable', {
        message: `Model ${c.model.name} has no backend available right now${untried}; retry with backoff`,
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
      return { ...out.value, cost: out.cost };
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
      return out.value;
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
