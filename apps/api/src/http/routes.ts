// A route is written once: its operation (method, path, schemas, responses) becomes both the OpenAPI
// entry and the Express handler, with the path's parameters, the caller and a validated body typed
// from the same declaration.
//
//   routes.add(
//     { method: 'post', path: '/api/keys', tag: 'keys', summary: 'Create an API key',
//       auth: { scopes: ['global'] }, body: createKeyBody, responses: { 201: … } },
//     async ({ caller, body, res }) => { const { name, scope } = body(); … },
//   );
import type { Request, RequestHandler, Response, Router } from 'express';
import type { z } from 'zod';
import type { ApiDoc, Operation } from './openapi.ts';
import type { KeyVerifier, Scope } from './principal.ts';
import {
  callerOf,
  keyAuthenticator,
  requireKey,
  type Caller,
  type KeyCaller,
  type PublicAccess,
  type SessionMode,
} from './auth.ts';
import { checkJson, parse } from './validate.ts';
import { ApiError, familyOf } from '../platform/errors.ts';
import { openRequestTrace } from '../platform/tracing.ts';

/**
 * Who may call: nobody in particular, the admin token (checked where the admin router is mounted),
 * or a key with one of `scopes` — and, with `public`, also whoever that hook admits without a key.
 */
export type RouteAuth =
  'none' | 'admin' | { scopes: readonly Scope[]; public?: PublicAccess; session?: SessionMode };

/** `{id: string}` for `/api/keys/{id}`. */
export type PathParams<P extends string> = P extends `${string}{${infer Name}}${infer Rest}`
  ? { [K in Name]: string } & PathParams<Rest>
  : unknown;

type CallerFor<A extends RouteAuth> = A extends { public: PublicAccess }
  ? Caller
  : A extends { scopes: readonly Scope[] }
    ? KeyCaller
    : undefined;

export interface RouteSpec<
  P extends string,
  B extends z.ZodType | undefined,
  A extends RouteAuth,
> extends Omit<Operation, 'path' | 'auth' | 'scopes' | 'body'> {
  /** The OpenAPI path, with `{param}` segments; the router's mount point included. */
  path: P;
  auth: A;
  /** Validates the JSON body; the handler reads it as `body`. */
  body?: B;
  /** A 400 names every invalid field of the body, not only the first. */
  everyBodyIssue?: boolean;
  /** An inference route: its requests are traced, or pass the client's trace on (openRequestTrace). */
  traced?: true;
  /**
   * A hot route (the front door's inference calls): also served ahead of Express, by the API's request
   * listener (`fast` below, http/fast-entry.ts), when the request spells the path exactly. Only for
   * routes with a key and no path parameters.
   */
  fast?: true;
}

/** A hot route served ahead of Express: the same steps as the router's, in the same order. */
export type FastRun = (req: Request, res: Response) => Promise<void>;

export interface RouteContext<P extends string, B extends z.ZodType | undefined, A extends RouteAuth> {
  req: Request;
  res: Response;
  params: PathParams<P>;
  caller: CallerFor<A>;
  /**
   * The body, validated against the route's schema (400 `Invalid request body: …` otherwise). A
   * function, so the handler decides which of its checks come first (authorization before 400).
   */
  body(): B extends z.ZodType ? z.infer<B> : undefined;
}

export class Routes {
  private readonly router: Router;
  private readonly doc: ApiDoc;
  /** Where the router is mounted: the part of each path Express does not see. */
  private readonly mount: string;
  private readonly keys?: KeyVerifier;
  /** Reads the request body; put after authentication, so an unauthenticated body is never read. */
  private readonly bodyParser: RequestHandler[];
  /** The same rules as `bodyParser` without the middleware around it (fast routes; jsonBodyReader). */
  private readonly readBody?: (req: Request, res: Response) => Promise<void> | undefined;

  constructor(
    router: Router,
    doc: ApiDoc,
    mount: string,
    keys?: KeyVerifier,
    bodyParser: RequestHandler[] = [],
    readBody?: (req: Request, res: Response) => Promise<void> | undefined,
  ) {
    this.router = router;
    this.doc = doc;
    this.mount = mount;
    this.keys = keys;
    this.bodyParser = bodyParser;
    this.readBody = readBody;
  }

  /** Fast routes (RouteSpec.fast) by their exact path: the method they take and their run. */
  readonly fast = new Map<string, { method: string; run: FastRun }>();

  /** The methods of each Express path, for 405's Allow header. */
  private readonly methods = new Map<string, Set<string>>();

  /**
   * After the last route: another method on a known path is 405 `method_not_allowed` with the
   * Allow header (HEAD comes with GET); OPTIONS answers 204 with the same header.
   */
  refuseOtherMethods(): void {
    for (const [path, methods] of this.methods) {
      const allowed = new Set(methods);
      if (allowed.has('GET')) allowed.add('HEAD');
      const allow = [...allowed].sort().join(', ');
      this.router.all(path, (req, res) => {
        res.setHeader('allow', allow);
        if (req.method === 'OPTIONS') return void res.status(204).end();
        throw new ApiError('method_not_allowed', {
          message: `Method ${req.method} is not allowed here; allowed: ${allow}`,
          headers: { allow },
        });
      });
    }
  }

  add<P extends string, A extends RouteAuth, B extends z.ZodType | undefined = undefined>(
    spec: RouteSpec<P, B, A>,
    handler: (ctx: RouteContext<P, B, A>) => unknown,
  ): void {
    const { path, auth, body: schema, everyBodyIssue, traced, fast, ...operation } = spec;
    if (!path.startsWith(this.mount)) throw new Error(`route ${path} is outside ${this.mount}`);
    this.doc.add({
      ...operation,
      path,
      auth: auth === 'none' || auth === 'admin' ? auth : 'key',
      ...(typeof auth === 'object' ? { scopes: auth.scopes, session: !!auth.session } : {}),
      ...(schema ? { body: schema } : {}),
    });
    const expressPath = path.slice(this.mount.length).replace(/\{(\w+)\}/g, ':$1') || '/';
    // The route's label for metrics and the access log, fixed now: once an error leaves the router,
    // Express has already reset `req.baseUrl` (a 401 on /api/keys would read `/keys`).
    const label = `${this.mount}${expressPath}`;
    const middleware: RequestHandler[] = [
      traced
        ? (req, res, next) => {
            res.locals.route = label;
            // First, so the key check is a span of the request's trace.
            res.locals.trace = openRequestTrace(req, res, label);
            next();
          }
        : (_req, res, next) => {
            res.locals.route = label;
            next();
          },
    ];
    if (typeof auth === 'object') {
      if (!this.keys) throw new Error(`route ${path} needs a key service`);
      middleware.push(
        requireKey(this.keys, auth.scopes, {
          ...(auth.public ? { public: auth.public } : {}),
          ...(auth.session ? { session: auth.session } : {}),
        }),
      );
    }
    middleware.push(...this.bodyParser);
    const known = this.methods.get(expressPath) ?? new Set<string>();
    known.add(spec.method.toUpperCase());
    this.methods.set(expressPath, known);
    const invoke = (req: Request, res: Response) => {
      // A NUL character (%00) decodes fine but no id holds one, and PostgreSQL refuses it in text.
      const params = req.params as Record<string, string>;
      for (const name in params)
        if (params[name]!.includes('\u0000'))
          throw new ApiError('malformed_path', {
            message: `The path parameter ${name} must not contain a NUL character (%00)`,
            param: name,
          });
      let parsed: { value: unknown } | undefined;
      const ctx = {
        req,
        res,
        params: req.params as PathParams<P>,
        caller: (typeof auth === 'object' ? callerOf(res) : undefined) as CallerFor<A>,
        body() {
          if (!parsed) checkJson(req.body, 'request body', { text: familyOf(req.originalUrl) === 'simple' });
          parsed ??= {
            value: schema
              ? parse(schema, req.body, 'request body', { every: everyBodyIssue ?? false })
              : undefined,
          };
          return parsed.value as ReturnType<RouteContext<P, B, A>['body']>;
        },
      };
      return handler(ctx);
    };
    // Express 5 passes a returned promise's rejection to the error middleware.
    this.router[spec.method](expressPath, ...middleware, invoke);
    if (fast) this.addFast(path, spec.method, label, auth, traced, invoke);
  }

  /** RouteSpec.fast: the router's steps as one function — label and trace, the key, the body, the handler. */
  private addFast(
    path: string,
    method: string,
    label: string,
    auth: RouteAuth,
    traced: true | undefined,
    invoke: (req: Request, res: Response) => unknown,
  ): void {
    if (typeof auth !== 'object' || !this.keys || !this.readBody || path.includes('{'))
      throw new Error(`route ${path} cannot be fast: it needs a key, a body reader and no path parameters`);
    const authenticate = keyAuthenticator(this.keys, auth.scopes, {
      ...(auth.public ? { public: auth.public } : {}),
      ...(auth.session ? { session: auth.session } : {}),
    });
    const readBody = this.readBody;
    this.fast.set(path, {
      method: method.toUpperCase(),
      async run(req, res) {
        res.locals.route = label;
        if (traced) res.locals.trace = openRequestTrace(req, res, label);
        req.params = {};
        const admitting = authenticate(req, res);
        if (admitting) await admitting;
        const reading = readBody(req, res);
        if (reading) await reading;
        await invoke(req, res);
      },
    });
  }
}
