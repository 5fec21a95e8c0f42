// /api/d/{endpoint-id}/… : the front door's OpenAI-compatible routes to one dedicated endpoint, by its
// id. The endpoint's owner's key (or none, when the endpoint is Public) admits the caller; the call
// itself is the dedicated product's (dedicated/call.ts). The fast path (./fast-path.ts) serves the
// same routes ahead of Express.
import type { Request, Response } from 'express';
import { isEndpointId, type DedicatedEndpoint } from '@berth/crds';
import { ApiError } from '../platform/errors.ts';
import type { Caller } from '../http/auth.ts';
import type { Routes } from '../http/routes.ts';
import { jsonObjectBody } from '../http/validate.ts';
import { openaiError } from '../http/openapi.ts';
import { callDedicated, HOLD_HEADER, type DedicatedDeps } from '../dedicated/call.ts';
import type { EndpointCache } from '../dedicated/ports.ts';
import { publicAccess } from '../dedicated/public-access.ts';
import type { TraceSpan } from '../platform/tracing.ts';

function endpointOf(req: Request, endpoints: EndpointCache): DedicatedEndpoint {
  const id = String(req.params.id);
  const endpoint = isEndpointId(id) ? endpoints.get(id) : undefined;
  // A terminated endpoint (its engines may still drain) takes no new calls.
  if (!endpoint || endpoint.metadata.deletionTimestamp)
    throw new ApiError('not_found', { message: `Dedicated endpoint ${id} not found` });
  return endpoint;
}

export const ROUTES = [
  {
    method: 'post',
    path: '/api/d/{id}/chat/completions',
    upstreamPath: '/chat/completions',
    summary: 'Chat completion on a dedicated endpoint (streaming with `stream: true`)',
  },
  {
    method: 'post',
    path: '/api/d/{id}/completions',
    upstreamPath: '/completions',
    summary: 'Text completion on a dedicated endpoint',
  },
  {
    method: 'get',
    path: '/api/d/{id}/models',
    upstreamPath: '/models',
    summary: "The endpoint's served model",
  },
] as const;

export const AUTH_SCOPES = ['inference', 'global'] as const;

/** The route's own work once the caller is admitted and the body read (both paths run this). */
export function serve(
  deps: DedicatedDeps,
  req: Request,
  res: Response,
  caller: Caller,
  method: 'get' | 'post',
  upstreamPath: string,
  body: () => unknown,
): Promise<void> {
  const endpoint = endpointOf(req, deps.endpoints);
  if (caller.principal && caller.accountId !== endpoint.spec.account)
    throw new ApiError('endpoint_access_denied');
  const metrics = deps.metrics;
  if (metrics) res.once('close', () => metrics.proxied(endpoint.metadata.name, res.statusCode));
  const payload = body() as Record<string, unknown> | undefined;
  const trace = res.locals.trace as TraceSpan | undefined;
  trace?.set({ 'berth.endpoint.id': endpoint.metadata.name });
  return callDedicated(deps, endpoint, {
    res,
    caller,
    method,
    upstreamPath,
    payload,
    requestId: String(res.locals.requestId),
    noHold: req.get(HOLD_HEADER)?.toLowerCase() === 'false',
    ...(trace ? { trace: trace.context } : {}),
  });
}

export function registerDedicatedRoutes(routes: Routes, deps: DedicatedDeps): void {
  const auth = { scopes: AUTH_SCOPES, public: publicAccess(deps), session: 'inference' } as const;
  for (const { method, path, upstreamPath, summary } of ROUTES) {
    routes.add(
      {
        method,
        path,
        tag: 'dedicated',
        auth,
        traced: true,
        summary,
        description:
          'Bearer key of the owning account, or none when the endpoint is Public (rate-limited). `model` may be omitted, the endpoint id or the served model (hub id); the served model answers. `building` → 503 `endpoint_building` with Retry-After; `failed` → 424 `endpoint_failed` with the reason; `hibernated`/`waking` → the request wakes the endpoint and is held until a replica is ready, at most `scaling.maxHeldRequests` calls per API replica (beyond them 503 `endpoint_waking` with Retry-After from the endpoint’s recent wakes). `X-Berth-Hold: false` answers that 503 at once, `X-Berth-Hold-Timeout: <seconds>` bounds the hold. The answer to a held call carries `x-berth-cold-start: true` and `x-berth-wake-ms` (a held stream: the comment `: x-berth-wake-ms <ms>` before its first event; its `: waking <stage> <elapsed>s` comments name the wake’s stage).',
        ...(method === 'post' ? { body: jsonObjectBody } : {}),
        responses: {
          200: { description: 'The engine’s answer, streamed as it is produced' },
          400: {
            description:
              'Malformed body, a `model` the endpoint does not serve (`model_not_served`, `param: "model"`), or a malformed `X-Berth-Hold-Timeout`',
            schema: openaiError,
          },
          401: { description: 'Missing or invalid key', schema: openaiError },
          403: {
            description: 'Another account’s endpoint: `Forbidden: Access denied.`',
            schema: openaiError,
          },
          404: { description: 'No such endpoint', schema: openaiError },
          424: { description: 'The endpoint failed', schema: openaiError },
          429: { description: 'Public endpoint rate limit', schema: openaiError },
          503: {
            description:
              'Building, or waking: not held (`X-Berth-Hold`), still waking after the hold, or `scaling.maxHeldRequests` calls held already; Retry-After says when to retry',
            schema: openaiError,
          },
        },
      },
      ({ req, res, caller, body }) => serve(deps, req, res, caller, method, upstreamPath, body),
    );
  }
}
