// The hot paths ahead of Express itself: the API's request listener hands the requests they take —
// the dedicated proxy's (inference/fast-path.ts) and the front door's fast routes (RouteSpec.fast in
// ./routes.ts) — to them, with what Express would have set up, and everything else to Express.
import { IncomingMessage, ServerResponse } from 'node:http';
import type express from 'express';
import type { ErrorRequestHandler, RequestHandler } from 'express';
import type { FastRun } from './routes.ts';
import { sessionWithoutKey } from './session.ts';

/** A fast path: which requests it takes, and how it serves one (inference/fast-path.ts). */
export interface FastRoutes<R> {
  match(req: IncomingMessage): R | undefined;
  serve(req: express.Request, res: express.Response, route: R): Promise<void>;
}

/**
 * The fast routes of a Routes table (Routes.fast) as one FastRoutes: a request whose path (before any
 * query) is one of theirs exactly, with their method, and not a dashboard session's without a key.
 */
export function fastRouteTable(
  table: ReadonlyMap<string, { method: string; run: FastRun }>,
): FastRoutes<FastRun> {
  return {
    match(req) {
      const url = req.url;
      if (!url) return undefined;
      const q = url.indexOf('?');
      const r = table.get(q === -1 ? url : url.slice(0, q));
      if (!r || req.method !== r.method || sessionWithoutKey(req.headers)) return undefined;
      return r.run;
    },
    serve: (req, res, run) => run(req, res),
  };
}

/** Several fast paths as one: the first that takes a request serves it. */
export function firstFast(
  paths: readonly FastRoutes<unknown>[],
): FastRoutes<{ path: FastRoutes<unknown>; route: unknown }> {
  return {
    match(req) {
      for (const path of paths) {
        const route = path.match(req);
        if (route !== undefined) return { path, route };
      }
      return undefined;
    },
    serve: (req, res, taken) => taken.path.serve(req, res, taken.route),
  };
}

const FAST_ENTRY = Symbol('fast entry');
type BerthApp = express.Express & { [FAST_ENTRY]?: (req: IncomingMessage, res: ServerResponse) => boolean };
/** next() for the prelude's middleware: an error is thrown to the fast entry, which answers it. */
const proceed = (err?: unknown) => {
  if (err) throw err;
};

/**
 * A fast path ahead of Express itself (requestListener): for a request it takes,
 * what Express's app.handle and router set up (the app's request and response prototypes, `locals`,
 * `originalUrl`), the middleware every request passes first (request id, access log), the route, and
 * errors to the app's own error handler — without Express's per-request dispatch (its final handler,
 * the router's closures and layer walk).
 */
export function attachFastEntry<R>(
  app: express.Express,
  fast: FastRoutes<R>,
  prelude: readonly RequestHandler[],
  errors: ErrorRequestHandler,
): void {
  (app as BerthApp)[FAST_ENTRY] = (incoming, outgoing) => {
    const route = fast.match(incoming);
    if (!route) return false;
    const req = incoming as express.Request;
    const res = outgoing as express.Response;
    req.res = res;
    res.req = req;
    // Made by expressClasses()' classes, they are the app's already; otherwise they become it here,
    // as Express's own dispatch does.
    if (req.app !== app) Object.setPrototypeOf(req, app.request);
    if (res.app !== app) Object.setPrototypeOf(res, app.response);
    res.locals ??= Object.create(null) as Record<string, unknown>;
    req.originalUrl = req.url;
    req.baseUrl = '';
    try {
      for (const handler of prelude) void handler(req, res, proceed); // synchronous: next() or throw
    } catch (err) {
      fail(errors, err, req, res);
      return true;
    }
    fast.serve(req, res, route).catch((err: unknown) => fail(errors, err, req, res));
    return true;
  };
}

function fail(errors: ErrorRequestHandler, err: unknown, req: express.Request, res: express.Response): void {
  try {
    errors(err, req, res, () => {});
  } catch {
    res.destroy(); // as Express's final handler would end a response its error handler could not
  }
}

/**
 * The request and response classes of an HTTP server whose requests go to an Express app that is made
 * later (the API binds its port first): `createServer({ IncomingMessage, ServerResponse })`, then
 * `attach(app)` once. Each request and response is then made an instance of the app's request and
 * response objects (their prototypes are set once, here), so the fast entry (attachFastEntry) has
 * nothing to do: Express's dispatch and the fast entry otherwise set the prototype of every request
 * and response they take (Object.setPrototypeOf on a live object, ~7 µs of a proxied call's CPU).
 */
export function expressClasses(): {
  IncomingMessage: typeof IncomingMessage;
  ServerResponse: typeof ServerResponse;
  attach(app: express.Express): void;
} {
  class AppRequest extends IncomingMessage {}
  class AppResponse extends ServerResponse {}
  return {
    IncomingMessage: AppRequest,
    ServerResponse: AppResponse as typeof ServerResponse,
    attach(app) {
      // app.request and app.response inherit from IncomingMessage's and ServerResponse's prototypes.
      Object.setPrototypeOf(AppRequest.prototype, app.request);
      Object.setPrototypeOf(AppResponse.prototype, app.response);
    },
  };
}

/**
 * The API's HTTP request listener: the hot paths first (attachFastEntry: the dedicated proxy's, the front
 * door's fast routes), everything else (and every request, for an app without them) to Express.
 */
export function requestListener(app: express.Express): (req: IncomingMessage, res: ServerResponse) => void {
  const entry = (app as BerthApp)[FAST_ENTRY];
  if (!entry) return app;
  return (req, res) => {
    if (!entry(req, res)) void app(req, res);
  };
}
