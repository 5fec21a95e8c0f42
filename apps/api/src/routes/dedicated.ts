// /api/d/{endpoint-id}/… : the OpenAI-compatible proxy to a dedicated endpoint.
import type { Request, RequestHandler, Response } from 'express';
import type { Dispatcher } from 'undici';
import { isEndpointId, type DedicatedEndpoint } from '@berth/crds';
import { ApiError, errorFrame, familyOf } from '../errors.ts';
import { callerOf, keyAuthenticator, type Caller, type PublicAccess } from '../http/auth.ts';
import { jsonBodyReader } from '../http/middleware.ts';
import { SESSION_COOKIE } from '../auth/session.ts';
import type { KeyService } from '../keys/service.ts';
import type { Routes } from '../http/routes.ts';
import { checkJson, jsonObjectBody, parse } from '../http/validate.ts';
import { openaiError } from '../openapi.ts';
import type { EndpointCache } from '../endpoints/ports.ts';
import { forward } from '../proxy/forward.ts';
import { wakeHeartbeat } from '../proxy/heartbeat.ts';
import type { EndpointMetrics } from '../endpoints/metrics.ts';
import type { RateLimiter } from '../proxy/ratelimit.ts';
import { callScope, ClientGone, seconds } from '../proxy/scope.ts';
import type { UsageRecorder } from '../proxy/usage.ts';
import { affinityKey } from '../upstream/affinity.ts';
import type { Acquired, Lease, Refusal, Upstream } from '../upstream/types.ts';

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

/** Opt-out of holding: `X-Berth-Hold: false` answers 503 at once while an endpoint wakes. */
export const HOLD_HEADER = 'x-berth-hold';
const RETRY_BUILDING = '30';
const RETRY_WAKING = '10';

function endpointOf(req: Request, endpoints: EndpointCache): DedicatedEndpoint {
  const id = String(req.params.id);
  const endpoint = isEndpointId(id) ? endpoints.get(id) : undefined;
  // A terminated endpoint (its engines may still drain) takes no new calls.
  if (!endpoint || endpoint.metadata.deletionTimestamp)
    throw new ApiError('not_found', { message: `Dedicated endpoint ${id} not found` });
  return endpoint;
}

/**
 * A Public endpoint needs no key: it is rate-limited per endpoint and per client address, and the
 * call is billed to the owning account (spec §5.2). Anything else needs a key, unknown ids included:
 * without one, an unknown id and a Private endpoint both answer 401 (existence is not revealed).
 */
function publicAccess(deps: DedicatedDeps): PublicAccess {
  return (req: Request, res: Response) => {
    const id = String(req.params.id);
    const e = isEndpointId(id) ? deps.endpoints.get(id) : undefined;
    return e?.spec.authMode === 'Public' ? limited(req, res, e, deps) : undefined;
  };
}

/** The Public endpoint's rate limits: headers on every answer, 429 past either limit. */
async function limited(
  req: Request,
  res: Response,
  e: DedicatedEndpoint,
  deps: DedicatedDeps,
): Promise<{ accountId: string }> {
  const id = e.metadata.name;
  const client = req.ip ?? req.socket.remoteAddress ?? 'unknown';
  // The client's limit first: a request it refuses is not counted against the endpoint, so one
  // client cannot use up the endpoint's allowance for everyone else.
  const perClient = await deps.limiter.hit(`cl:${id}:${client}`, deps.config.publicLimitPerClient);
  const perEndpoint = perClient.allowed
    ? await deps.limiter.hit(`ep:${id}`, deps.config.publicLimitPerEndpoint)
    : undefined;
  const tightest = perEndpoint && perEndpoint.remaining < perClient.remaining ? perEndpoint : perClient;
  res.setHeader('x-ratelimit-limit-requests', String(tightest.limit));
  res.setHeader('x-ratelimit-remaining-requests', String(tightest.remaining));
  res.setHeader('x-ratelimit-reset-requests', `${Math.ceil(tightest.resetMs / 1000)}s`);
  const refused = !perClient.allowed ? perClient : !perEndpoint!.allowed ? perEndpoint : undefined;
  if (refused) {
    throw new ApiError('rate_limited', {
      message: `Rate limit reached for public endpoint ${id}: ${refused.limit} requests per minute${refused === perClient ? ' per client' : ''}`,
      headers: { 'retry-after': String(Math.max(1, Math.ceil(refused.resetMs / 1000))) },
    });
  }
  return { accountId: e.spec.account };
}

/** What the caller sees when no upstream was given. */
function refusalError(id: string, r: Exclude<Refusal, { reason: 'aborted' }>, holdMs: number): ApiError {
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
  if (asked === undefined || asked === endpoint.metadata.name) return { ...body, model: served };
  throw new ApiError('model_not_served', {
    message: `Endpoint ${endpoint.metadata.name} serves the model ${JSON.stringify(served)}, not ${JSON.stringify(asked)}: send that model, the endpoint id, or no model`,
    param: 'model',
  });
}

const ROUTES = [
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

const AUTH_SCOPES = ['inference', 'global'] as const;

/** The route's own work once the caller is admitted and the body read (both paths run this). */
function serve(
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
  return callDedicated(deps, endpoint, { req, res, caller, method, upstreamPath, payload });
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
        summary,
        description:
          'Bearer key of the owning account, or none when the endpoint is Public (rate-limited). `model` may be omitted, the endpoint id or the served model (hub id); the served model answers. `building` → 503 `endpoint_building` with Retry-After; `failed` → 424 `endpoint_failed` with the reason; `hibernated`/`waking` → the request wakes the endpoint and is held until a replica is ready (send `X-Berth-Hold: false` for an immediate 503).',
        ...(method === 'post' ? { body: jsonObjectBody } : {}),
        responses: {
          200: { description: 'The engine’s answer, streamed as it is produced' },
          400: {
            description:
              'Malformed body, or a `model` the endpoint does not serve (`model_not_served`, `param: "model"`)',
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
          503: { description: 'Building, or still waking after the hold', schema: openaiError },
        },
      },
      ({ req, res, caller, body }) => serve(deps, req, res, caller, method, upstreamPath, body),
    );
  }
}

// `/api/d/<id>/<route>` as the fast path takes it: an id of plain characters (nothing to decode),
// the route's exact spelling, no trailing slash; a query string is allowed (ignored, as by Express).
const FAST_PATH = /^\/api\/d\/([\w.~-]+)\/(chat\/completions|completions|models)(?:\?|$)/;
const SESSION_MARKER = `${SESSION_COOKIE}=`;

/** A request the fast path takes: its route (label, method) and upstream path. */
export interface FastRoute {
  method: 'get' | 'post';
  upstreamPath: string;
  label: string;
  id: string;
}

export interface FastPath {
  /** The route the fast path takes this request to, or undefined: the registered routes' request. */
  match(req: { url?: string; method?: string; headers: Request['headers'] }): FastRoute | undefined;
  /** Serves a matched request (an Express request and response); rejects with the route's errors. */
  serve(req: Request, res: Response, route: FastRoute): Promise<void>;
  /** The same as application-level middleware, for an app used without its request listener. */
  middleware: RequestHandler;
}

/**
 * The dedicated proxy's routes without the Express router: it takes the common request to
 * `/api/d/<id>/…` and does exactly what the registered route does, in the same order — the caller
 * admitted (keyAuthenticator: Public endpoints' rate limits, key, scope, revocation), the body read
 * (jsonBodyReader: body-parser's rules), the route's checks and the call (serve) — with errors going to
 * the same error handler. The API's request listener (app.ts, requestListener) runs it before Express
 * itself; `middleware` is the same before every router, for an app used directly. It saves Express's
 * dispatch, the router's walk through every `/api` route registered before these (path-to-regexp
 * matching of the Elastic, tools, billing, Olympus… routes) and body-parser's per-request work.
 * Anything else — other methods (405, HEAD, OPTIONS), another spelling of the path (case, trailing
 * slash, percent-encoding), a dashboard session's cookie without a Bearer key — goes on to the
 * registered routes unchanged.
 */
export function dedicatedFastPath(deps: DedicatedDeps, keys: KeyService, maxBodyBytes: number): FastPath {
  const authenticate = keyAuthenticator(keys, AUTH_SCOPES, {
    public: publicAccess(deps),
    session: 'inference',
  });
  const readBody = jsonBodyReader(maxBodyBytes);
  const routes = new Map(
    ROUTES.map((r) => [
      r.upstreamPath.slice(1),
      {
        method: r.method,
        verb: r.method.toUpperCase(),
        upstreamPath: r.upstreamPath,
        label: r.path.replace('{id}', ':id'),
      },
    ]),
  );

  const match: FastPath['match'] = (req) => {
    const url = req.url;
    if (!url?.startsWith('/api/d/')) return undefined;
    const m = FAST_PATH.exec(url);
    const route = m && routes.get(m[2]!);
    if (!route || req.method !== route.verb) return undefined;
    // A dashboard session is read by the /api router's session middleware: leave it to that path.
    if (req.headers.authorization === undefined && req.headers.cookie?.includes(SESSION_MARKER))
      return undefined;
    return { method: route.method, upstreamPath: route.upstreamPath, label: route.label, id: m[1]! };
  };

  async function serveFast(req: Request, res: Response, route: FastRoute): Promise<void> {
    res.locals.route = route.label;
    req.params = { id: route.id };
    await authenticate(req, res);
    const reading = readBody(req, res);
    if (reading) await reading;
    const method = route.method;
    // The registered route's body(): checked, then (POST) the schema's 400 (serve() asks once).
    await serve(deps, req, res, callerOf(res), method, route.upstreamPath, () => {
      checkJson(req.body, 'request body', { text: familyOf(req.originalUrl) === 'simple' });
      return method === 'post' ? parse(jsonObjectBody, req.body) : undefined;
    });
  }

  return {
    match,
    serve: serveFast,
    middleware: (req, res, next) => {
      const route = match(req);
      if (!route) return next();
      return serveFast(req, res, route);
    },
  };
}

/**
 * Calls a dedicated endpoint the caller may use (checked by the route): hold while it wakes, forward,
 * record the usage. `/api/d/{id}/…` and the Elastic routes (a `model` naming an `endpt-…`) share it.
 */
export async function callDedicated(
  deps: Pick<DedicatedDeps, 'endpoints' | 'upstream' | 'usage' | 'dispatcher' | 'config' | 'metrics'>,
  endpoint: DedicatedEndpoint,
  call: {
    req: Request;
    res: Response;
    caller: Caller;
    method: 'get' | 'post';
    upstreamPath: string;
    payload: Record<string, unknown> | undefined;
  },
): Promise<void> {
  const { req, res, caller, method, upstreamPath } = call;
  const id = endpoint.metadata.name;
  const metrics = deps.metrics;
  // `model` may be omitted, the endpoint id or its hub id: the served model answers (else 400).
  const payload = call.payload && servedModelBody(endpoint, call.payload);

  const scope = callScope(res, caller.tracked ?? caller.signal, deps.config.requestTimeoutMs);
  let lease: Lease | undefined;
  try {
    const hold = req.get(HOLD_HEADER)?.toLowerCase() === 'false' ? 0 : deps.config.wakeHoldMs;
    const now = deps.endpoints.get(id)?.status?.phase ?? 'waking';
    const options = { hold, signal: scope.signal, key: affinityKey(payload) };
    let acquired: Acquired;
    if (now === 'hibernated' || now === 'waking') {
      const phase = () => deps.endpoints.get(id)?.status?.phase ?? 'waking';
      // A streaming request held while the endpoint wakes gets its headers at once and SSE comments
      // (`: waking …`) so proxies keep the connection and the user sees progress.
      const stopBeats =
        hold > 0 && payload?.stream === true
          ? wakeHeartbeat(res, phase, deps.config.wakeHeartbeatMs)
          : undefined;
      const unhold = hold > 0 && metrics ? metrics.held(id) : undefined;
      try {
        acquired = await deps.upstream.acquire(endpoint, options);
      } finally {
        stopBeats?.();
        unhold?.();
      }
    } else acquired = await deps.upstream.acquire(endpoint, options);
    if (!acquired.ok) {
      if (acquired.reason === 'aborted') throw scope.signal.reason;
      throw refusalError(id, acquired, deps.config.wakeHoldMs);
    }
    lease = acquired.lease;
    const usage = await forward(
      {
        upstream: lease,
        method: method === 'post' ? 'POST' : 'GET',
        path: upstreamPath,
        body: payload,
        requestId: String(res.locals.requestId),
        signal: scope.signal,
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
