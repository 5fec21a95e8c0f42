// Calling a dedicated endpoint: wait for an upstream (wake and hold), forward, record the usage; and
// what the caller sees when no upstream was given (refusals as ApiErrors, Retry-After from the
// endpoint's measured wake time) or when it names another model than the endpoint serves. A call held
// through a wake is told so: `x-berth-cold-start: true` and `x-berth-wake-ms` (./proxy/heartbeat.ts).
// The front door (inference/) decides that a call is one and admits the caller; this module writes
// the answer to the response it is given.
import type { Response } from 'express';
import type { Dispatcher } from 'undici';
import type { DedicatedEndpoint } from '@berth/crds';
import type { Config } from '../platform/config.ts';
import { ApiError, errorFrame } from '../platform/errors.ts';
import { childSpan, type Context } from '../platform/tracing.ts';
import type { Caller } from '../http/auth.ts';
import type { EndpointCache } from './ports.ts';
import { withMember } from '../http/body-bytes.ts';
import { forward } from './proxy/forward.ts';
import { COLD_START_HEADER, wakeHeartbeat, wakeMsComment, WAKE_MS_HEADER } from './proxy/heartbeat.ts';
import type { EndpointMetrics } from './metrics.ts';
import type { RateLimiter } from './proxy/ratelimit.ts';
import { callScope, ClientGone, seconds } from './proxy/scope.ts';
import type { UsageRecorder } from './proxy/usage.ts';
import { affinityKey } from './upstream/affinity.ts';
import type { Acquired, Lease, Refusal, Upstream } from './upstream/types.ts';
import { wakeProgress, type WakeStage } from './wake-receipt.ts';

export interface DedicatedDeps {
  endpoints: EndpointCache;
  upstream: Upstream<DedicatedEndpoint>;
  usage: UsageRecorder;
  limiter: RateLimiter;
  dispatcher: Dispatcher;
  /** Per-endpoint series (absent in tests that do not read them). */
  metrics?: EndpointMetrics;
  config: {
    wakeHoldMs: number;
    /** Interval of the SSE comments a held streaming request receives. */
    wakeHeartbeatMs: number;
    requestTimeoutMs: number;
    retries: number;
    publicLimitPerEndpoint: number;
    publicLimitPerClient: number;
  };
}

/** The proxy's settings, from the parsed configuration. */
export function callConfig(
  c: Pick<
    Config,
    | 'WAKE_HOLD_TIMEOUT_MS'
    | 'WAKE_HEARTBEAT_MS'
    | 'REQUEST_TIMEOUT_MS'
    | 'PROXY_RETRIES'
    | 'PUBLIC_RATE_LIMIT_PER_ENDPOINT'
    | 'PUBLIC_RATE_LIMIT_PER_CLIENT'
  >,
): DedicatedDeps['config'] {
  return {
    wakeHoldMs: c.WAKE_HOLD_TIMEOUT_MS,
    wakeHeartbeatMs: c.WAKE_HEARTBEAT_MS,
    requestTimeoutMs: c.REQUEST_TIMEOUT_MS,
    retries: c.PROXY_RETRIES,
    publicLimitPerEndpoint: c.PUBLIC_RATE_LIMIT_PER_ENDPOINT,
    publicLimitPerClient: c.PUBLIC_RATE_LIMIT_PER_CLIENT,
  };
}

/** Opt-out of holding: `X-Berth-Hold: false` answers 503 at once while an endpoint wakes. */
export const HOLD_HEADER = 'x-berth-hold';
/** A bound on the hold in seconds, as Hugging Face's `X-Scale-Up-Timeout`; 0 is `X-Berth-Hold: false`. */
export const HOLD_TIMEOUT_HEADER = 'x-berth-hold-timeout';
const RETRY_BUILDING = '30';

/**
 * How long a call may be held while its endpoint wakes, in milliseconds: the server's
 * WAKE_HOLD_TIMEOUT_MS, less when `X-Berth-Hold-Timeout` asks for less, 0 with `X-Berth-Hold: false`.
 * A malformed bound is a 400 naming the header, before anything is woken.
 */
export function holdOf(header: string | string[] | undefined, serverHoldMs: number): number {
  if (header === undefined) return serverHoldMs;
  const value = Array.isArray(header) ? header.join(',') : header;
  const s = /^\s*\d{1,9}(\.\d{1,3})?\s*$/.test(value) ? Number(value) : NaN;
  if (Number.isNaN(s))
    throw new ApiError('validation_error', {
      message: `X-Berth-Hold-Timeout must be a number of seconds, 0 or more (a hold ends after ${seconds(serverHoldMs)} at the most), got ${JSON.stringify(value.slice(0, 40))}`,
      param: 'X-Berth-Hold-Timeout',
    });
  return Math.min(serverHoldMs, Math.round(s * 1000));
}

/** One call of a dedicated endpoint, as the front door hands it over. */
export interface DedicatedCall {
  /** Where the answer goes, streamed as it arrives. */
  res: Response;
  caller: Caller;
  method: 'get' | 'post';
  upstreamPath: string;
  payload: Record<string, unknown> | undefined;
  requestId: string;
  /** `X-Berth-Hold: false`: answer 503 at once while the endpoint wakes (HOLD_HEADER). */
  noHold?: boolean;
  /** The request's trace (platform/tracing.ts): the wake and the engine call are spans of it. */
  trace?: Context;
}

/** What the caller sees when no upstream was given. */
function refusalError(id: string, r: Exclude<Refusal, { reason: 'aborted' }>, holdMs: number): ApiError {
  const waking = (message: string, retryAfter: number) =>
    new ApiError('endpoint_waking', {
      message: `${message}; retry in ${retryAfter} s`,
      headers: { 'retry-after': String(retryAfter) },
    });
  switch (r.reason) {
    case 'building':
      return new ApiError('endpoint_building', {
        message: `Endpoint ${id} is still being provisioned (status: building); it cannot be called yet`,
        headers: { 'retry-after': RETRY_BUILDING },
      });
    case 'failed': {
      const s = r.endpoint.status;
      if (s?.phase === 'building') return refusalError(id, { reason: 'building' }, holdMs);
      if (s?.phase !== 'failed') return new ApiError('endpoint_unavailable');
      return new ApiError('endpoint_failed', {
        message: `Endpoint ${id} has failed (${s.reason ?? 'Failed'}): ${s.message ?? 'see GET /api/endpoints/' + id + '/logs'}`,
      });
    }
    case 'waking':
      return waking(`Endpoint ${id} is waking up`, r.retryAfter);
    case 'timeout':
      return waking(`Endpoint ${id} did not become ready within ${seconds(holdMs)}`, r.retryAfter);
    case 'full':
      return waking(
        r.limit === 0
          ? `Endpoint ${id} is waking up and holds no calls (scaling.maxHeldRequests is 0)`
          : `Endpoint ${id} is waking up and already holds ${r.limit} calls (scaling.maxHeldRequests)`,
        r.retryAfter,
      );
    case 'deleted':
      return new ApiError('not_found', { message: `Dedicated endpoint ${id} not found` });
  }
}

/**
 * An endpoint serves one model: `model` may be omitted, the endpoint's id or the model's hub id, and
 * the engine is asked for the served model (which names itself in the answer). Anything else is
 * refused here rather than with the engine's 404, naming what the endpoint serves.
 */
export function servedModelBody(
  endpoint: DedicatedEndpoint,
  body: Record<string, unknown>,
): Record<string, unknown> {
  const served = endpoint.spec.model.id;
  const asked = body.model;
  if (asked === served) return body;
  if (asked === undefined || asked === endpoint.metadata.name) return withMember(body, 'model', served);
  throw new ApiError('model_not_served', {
    message: `Endpoint ${endpoint.metadata.name} serves the model ${JSON.stringify(served)}, not ${JSON.stringify(asked)}: send that model, the endpoint id, or no model`,
    param: 'model',
  });
}

/**
 * Calls a dedicated endpoint the caller may use (checked by the route): hold while it wakes, forward,
 * record the usage. The front door's `/api/d/{id}/…` routes and its OpenAI routes (a `model` naming
 * an `endpt-…`) both call it (inference/).
 */
export async function callDedicated(
  deps: Pick<DedicatedDeps, 'endpoints' | 'upstream' | 'usage' | 'dispatcher' | 'config' | 'metrics'>,
  endpoint: DedicatedEndpoint,
  call: DedicatedCall,
): Promise<void> {
  const { res, caller, method, upstreamPath } = call;
  const id = endpoint.metadata.name;
  const metrics = deps.metrics;
  // `model` may be omitted, the endpoint id or its hub id: the served model answers (else 400).
  const payload = call.payload && servedModelBody(endpoint, call.payload);

  // Read here rather than by each front door (`/api/d/…` and the OpenAI routes both call this).
  const hold = call.noHold ? 0 : holdOf(res.req?.headers?.[HOLD_TIMEOUT_HEADER], deps.config.wakeHoldMs);
  const scope = callScope(res, caller.tracked ?? caller.signal, deps.config.requestTimeoutMs);
  let lease: Lease | undefined;
  try {
    const now = deps.endpoints.get(id)?.status?.phase ?? 'waking';
    const options = { hold, signal: scope.signal, key: affinityKey(payload) };
    let acquired: Acquired;
    if (now === 'hibernated' || now === 'waking') {
      const heldAt = Date.now();
      const progress = (): { stage: WakeStage; seconds: number } => {
        const p = wakeProgress(deps.endpoints.get(id));
        return { stage: p?.stage ?? 'ready', seconds: (Date.now() - (p?.startedAt ?? heldAt)) / 1000 };
      };
      // A streaming request held while the endpoint wakes gets its headers at once and SSE comments
      // (`: waking <stage> <elapsed>s`) so proxies keep the connection and the user sees progress.
      const stopBeats =
        hold > 0 && payload?.stream === true
          ? wakeHeartbeat(res, progress, deps.config.wakeHeartbeatMs)
          : undefined;
      const unhold = hold > 0 && metrics ? metrics.held(id) : undefined;
      const span = childSpan('berth.wake', call.trace, {
        'berth.endpoint.id': id,
        'berth.wake.phase': now,
        'berth.wake.hold_ms': hold,
      });
      try {
        acquired = await deps.upstream.acquire(endpoint, options);
        span?.set({
          'berth.outcome': acquired.ok ? 'ok' : acquired.reason,
          ...(acquired.ok && acquired.wake ? { 'berth.wake.held_ms': acquired.wake.heldMs } : {}),
        });
      } finally {
        stopBeats?.();
        unhold?.();
        span?.end();
      }
    } else acquired = await deps.upstream.acquire(endpoint, options);
    if (!acquired.ok) {
      if (acquired.reason === 'aborted') throw scope.signal.reason;
      throw refusalError(id, acquired, hold);
    }
    lease = acquired.lease;
    const wake = acquired.wake;
    if (wake) {
      // A cold start: said in headers when they are still to be sent, else (a held stream) in a comment.
      if (!res.headersSent) {
        res.setHeader(COLD_START_HEADER, 'true');
        res.setHeader(WAKE_MS_HEADER, String(wake.heldMs));
      } else if (!res.writableEnded) res.write(wakeMsComment(wake.heldMs));
    }
    const usage = await forward(
      {
        upstream: lease,
        method: method === 'post' ? 'POST' : 'GET',
        path: upstreamPath,
        body: payload,
        requestId: call.requestId,
        signal: scope.signal,
        ...(wake ? { onFirstByte: wake.firstByte } : {}),
        ...(call.trace ? { trace: call.trace } : {}),
      },
      res,
      { dispatcher: deps.dispatcher, retries: deps.config.retries },
    );
    if (usage) {
      deps.usage.record({ accountId: caller.accountId, endpointId: id, ...usage });
      metrics?.tokens(id, usage.promptTokens, usage.completionTokens);
    }
  } catch (err) {
    if (err instanceof ClientGone) return;
    if (res.headersSent) {
      if (!res.writableEnded && err instanceof ApiError) res.end(errorFrame(err) + 'data: [DONE]\n\n');
      return;
    }
    throw err;
  } finally {
    scope.end();
    lease?.release();
  }
}
