// /api/d/{endpoint-id}/… : the OpenAI-compatible proxy to a dedicated endpoint.
import type { Request, Response, Router } from 'express';
import type { Dispatcher } from 'undici';
import { isEndpointId, type DedicatedEndpoint } from '@berth/crds';
import { ApiError, errorFrame } from '../errors.ts';
import { bearerToken } from '../http/auth.ts';
import type { KeyService } from '../keys/service.ts';
import type { ApiDoc } from '../openapi.ts';
import { openaiError } from '../openapi.ts';
import type { EndpointCache } from '../endpoints/ports.ts';
import { forward } from '../proxy/forward.ts';
import type { RateLimiter } from '../proxy/ratelimit.ts';
import type { UsageRecorder } from '../proxy/usage.ts';
import type { Refusal, Upstream } from '../upstream/types.ts';

export interface DedicatedDeps {
  keys: KeyService;
  endpoints: EndpointCache;
  upstream: Upstream<DedicatedEndpoint>;
  usage: UsageRecorder;
  limiter: RateLimiter;
  dispatcher: Dispatcher;
  config: {
    wakeHoldMs: number;
    requestTimeoutMs: number;
    retries: number;
    publicLimitPerEndpoint: number;
    publicLimitPerClient: number;
  };
}

/** Opt-out of holding: `X-Berth-Hold: false` answers 503 at once while an endpoint wakes. */
export const HOLD_HEADER = 'x-berth-hold';
const RETRY_BUILDING = '30';
const RETRY_WAKING = '10';

class ClientGone extends Error {}

/** `780 s`, `1.5 s`: whole seconds as they are, others to a tenth (never rounded to a wrong limit). */
function seconds(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${(ms / 1000).toFixed(1)} s`;
}

async function authorize(
  req: Request,
  res: Response,
  e: DedicatedEndpoint,
  deps: DedicatedDeps,
): Promise<{ accountId: string; signal?: AbortSignal }> {
  if (e.spec.authMode === 'Public') {
    const id = e.metadata.name;
    const client = req.ip ?? req.socket.remoteAddress ?? 'unknown';
    const [perEndpoint, perClient] = await Promise.all([
      deps.limiter.hit(`ep:${id}`, deps.config.publicLimitPerEndpoint),
      deps.limiter.hit(`cl:${id}:${client}`, deps.config.publicLimitPerClient),
    ]);
    const tightest = perClient.remaining < perEndpoint.remaining ? perClient : perEndpoint;
    res.setHeader('x-ratelimit-limit-requests', String(tightest.limit));
    res.setHeader('x-ratelimit-remaining-requests', String(tightest.remaining));
    res.setHeader('x-ratelimit-reset-requests', `${Math.ceil(tightest.resetMs / 1000)}s`);
    const refused = !perEndpoint.allowed ? perEndpoint : !perClient.allowed ? perClient : undefined;
    if (refused) {
      throw new ApiError('rate_limited', {
        message: `Rate limit reached for public endpoint ${id}: ${refused.limit} requests per minute${refused === perClient ? ' per client' : ''}`,
        headers: { 'retry-after': String(Math.max(1, Math.ceil(refused.resetMs / 1000))) },
      });
    }
    // Billing and quotas stay with the owning account (spec §5.2).
    return { accountId: e.spec.account };
  }
  const token = bearerToken(req);
  if (!token) throw new ApiError('missing_authorization');
  const result = await deps.keys.verify(token);
  if (!result.ok) throw new ApiError(result.code);
  const p = result.principal;
  if (p.scope === 'compute') {
    throw new ApiError('insufficient_scope', {
      message: 'This API key has scope "compute"; this route needs a key with scope "inference" or "global"',
    });
  }
  if (p.accountId !== e.spec.account) throw new ApiError('endpoint_access_denied');
  res.locals.principal = p;
  const tracked = deps.keys.track(p.keyId);
  res.on('close', tracked.release);
  return { accountId: p.accountId, signal: tracked.signal };
}

/** What the caller sees when no upstream was given. */
function refusalError(id: string, r: Refusal, holdMs: number): ApiError {
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
      return new ApiError('endpoint_waking', {
        message: `Endpoint ${id} is waking up; retry in a few seconds`,
        headers: { 'retry-after': RETRY_WAKING },
      });
    case 'timeout':
      return new ApiError('endpoint_waking', {
        message: `Endpoint ${id} did not become ready within ${seconds(holdMs)}; retry shortly`,
        headers: { 'retry-after': RETRY_WAKING },
      });
    case 'deleted':
      return new ApiError('not_found', { message: `Dedicated endpoint ${id} not found` });
    case 'aborted':
      // The caller is gone, or the signal's reason (revocation, wall-clock limit) is thrown instead.
      return new ApiError('endpoint_unavailable');
  }
}

export function registerDedicatedRoutes(router: Router, doc: ApiDoc, deps: DedicatedDeps): void {
  const handle = (upstreamPath: string, method: 'GET' | 'POST') => async (req: Request, res: Response) => {
    const id = String(req.params.id);
    const endpoint = isEndpointId(id) ? deps.endpoints.get(id) : undefined;
    if (!endpoint) throw new ApiError('not_found', { message: `Dedicated endpoint ${id} not found` });
    const auth = await authorize(req, res, endpoint, deps);
    if (method === 'POST' && (typeof req.body !== 'object' || req.body === null || Array.isArray(req.body))) {
      throw new ApiError('validation_error', { message: 'The request body must be a JSON object' });
    }

    // Everything that ends this request early: the client leaving, its key being revoked, and the
    // wall-clock limit.
    const controller = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) controller.abort(new ClientGone());
    };
    res.on('close', onClose);
    const limit = setTimeout(
      () =>
        controller.abort(
          new ApiError('gateway_timeout', {
            message: `The request exceeded the wall-clock limit of ${seconds(deps.config.requestTimeoutMs)}`,
          }),
        ),
      deps.config.requestTimeoutMs,
    );
    const revoked = () => controller.abort(auth.signal?.reason);
    auth.signal?.addEventListener('abort', revoked, { once: true });
    let release = () => {};
    try {
      const holdMs = req.get(HOLD_HEADER)?.toLowerCase() === 'false' ? 0 : deps.config.wakeHoldMs;
      const acquired = await deps.upstream.acquire(endpoint, { hold: holdMs, signal: controller.signal });
      if (!acquired.ok) {
        if (acquired.reason === 'aborted') throw controller.signal.reason;
        throw refusalError(id, acquired, deps.config.wakeHoldMs);
      }
      release = () => acquired.lease.release();
      const usage = await forward(
        {
          upstream: acquired.lease,
          method,
          path: upstreamPath,
          body: method === 'POST' ? (req.body as Record<string, unknown>) : undefined,
          requestId: String(res.locals.requestId),
          signal: controller.signal,
        },
        res,
        { dispatcher: deps.dispatcher, retries: deps.config.retries },
      );
      if (usage) deps.usage.record({ accountId: auth.accountId, endpointId: id, ...usage });
    } catch (err) {
      if (err instanceof ClientGone) return;
      if (res.headersSent) {
        if (!res.writableEnded && err instanceof ApiError) res.end(errorFrame(err) + 'data: [DONE]\n\n');
        return;
      }
      throw err;
    } finally {
      clearTimeout(limit);
      res.off('close', onClose);
      auth.signal?.removeEventListener('abort', revoked);
      release();
    }
  };

  for (const [path, upstream, method, summary] of [
    [
      '/d/:id/chat/completions',
      '/chat/completions',
      'POST',
      'Chat completion on a dedicated endpoint (streaming with `stream: true`)',
    ],
    ['/d/:id/completions', '/completions', 'POST', 'Text completion on a dedicated endpoint'],
    ['/d/:id/models', '/models', 'GET', "The endpoint's served model"],
  ] as const) {
    doc.add({
      method: method === 'POST' ? 'post' : 'get',
      path: `/api${path.replace(':id', '{id}')}`,
      tag: 'dedicated',
      auth: 'key',
      scopes: ['inference', 'global'],
      summary,
      description:
        'Bearer key of the owning account, or none when the endpoint is Public (rate-limited). `building` → 503 `endpoint_building` with Retry-After; `failed` → 424 `endpoint_failed` with the reason; `hibernated`/`waking` → the request wakes the endpoint and is held until a replica is ready (send `X-Berth-Hold: false` for an immediate 503).',
      responses: {
        200: { description: 'The engine’s answer, streamed as it is produced' },
        401: { description: 'Missing or invalid key', schema: openaiError },
        403: { description: 'Another account’s endpoint: `Forbidden: Access denied.`', schema: openaiError },
        404: { description: 'No such endpoint', schema: openaiError },
        424: { description: 'The endpoint failed', schema: openaiError },
        429: { description: 'Public endpoint rate limit', schema: openaiError },
        503: { description: 'Building, or still waking after the hold', schema: openaiError },
      },
    });
    if (method === 'POST') router.post(path, handle(upstream, method));
    else router.get(path, handle(upstream, method));
  }
}
