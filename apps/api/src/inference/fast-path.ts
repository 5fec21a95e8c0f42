// The hot path of `/api/d/<id>/…` ahead of Express (see dedicatedFastPath).
import type { Request, RequestHandler, Response } from 'express';
import { familyOf } from '../platform/errors.ts';
import { openRequestTrace } from '../platform/tracing.ts';
import { callerOf, keyAuthenticator } from '../http/auth.ts';
import { jsonBodyReader } from '../http/middleware.ts';
import type { KeyVerifier } from '../http/principal.ts';
import { sessionWithoutKey } from '../http/session.ts';
import { checkJson, jsonObjectBody, parse } from '../http/validate.ts';
import type { DedicatedDeps } from '../dedicated/call.ts';
import { publicAccess } from '../dedicated/public-access.ts';
import { AUTH_SCOPES, ROUTES, serve } from './dedicated-routes.ts';

// `/api/d/<id>/<route>` as the fast path takes it: an id of plain characters (nothing to decode),
// the route's exact spelling, no trailing slash; a query string is allowed (ignored, as by Express).
const FAST_PATH = /^\/api\/d\/([\w.~-]+)\/(chat\/completions|completions|models)(?:\?|$)/;

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
 * The dedicated proxy's routes without the Express router: it takes the common request to `/api/d/<id>/…` and
 * does exactly what the registered route does, in the same order — the caller admitted (keyAuthenticator:
 * Public endpoints' rate limits, key, scope, revocation), the body read (jsonBodyReader: body-parser's
 * rules), the route's checks and the call (serve) — with errors going to the same error handler. The API's
 * request listener (http/fast-entry.ts, requestListener) runs it before Express itself; `middleware` is the
 * same before every router, for an app used directly. It saves Express's dispatch, the router's walk through
 * every `/api` route registered before these (path-to-regexp matching of the Elastic, tools, billing,
 * Olympus… routes) and body-parser's per-request work. Anything else — other methods (405, HEAD, OPTIONS),
 * another spelling of the path (case, trailing slash, percent-encoding), a dashboard session's cookie without
 * a Bearer key — goes on to the registered routes unchanged.
 */
export function dedicatedFastPath(deps: DedicatedDeps, keys: KeyVerifier, maxBodyBytes: number): FastPath {
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
    if (sessionWithoutKey(req.headers)) return undefined;
    return { method: route.method, upstreamPath: route.upstreamPath, label: route.label, id: m[1]! };
  };

  async function serveFast(req: Request, res: Response, route: FastRoute): Promise<void> {
    res.locals.route = route.label;
    res.locals.trace = openRequestTrace(req, res, route.label);
    req.params = { id: route.id };
    const admitting = authenticate(req, res);
    if (admitting) await admitting;
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
