// The Express application, assembled from its parts. Tests and the server both call createApp.
import type { IncomingMessage, ServerResponse } from 'node:http';
import express, { type ErrorRequestHandler, type RequestHandler } from 'express';
import type { Logger } from 'pino';
import type { Config } from './config.ts';
import { accessLog, errorHandler, jsonBody, notFound, requestId } from './http/middleware.ts';
import { requireAdmin } from './http/auth.ts';
import type { KeyService } from './keys/service.ts';
import type { ApiMetrics } from './metrics.ts';
import { ApiDoc } from './openapi.ts';
import { Routes } from './http/routes.ts';
import type { HealthRepository } from './repositories/keys.ts';
import type { AccountRepository } from './repositories/accounts.ts';
import { registerAdminRoutes } from './routes/admin.ts';
import { registerHealthRoutes, type Lifecycle } from './routes/health.ts';
import { registerKeyRoutes } from './routes/keys.ts';
import { registerQuotaRoutes } from './routes/quotas.ts';
import { registerCatalogAdminRoutes, registerElasticRoutes } from './routes/elastic.ts';
import type { ElasticCatalog } from './elastic/catalog.ts';
import type { ElasticCaller } from './elastic/call.ts';
import { registerHardwareRoutes } from './routes/hardware.ts';
import { registerEndpointRoutes } from './routes/endpoints.ts';
import type { AccountLock, Quotas } from './quotas.ts';
import {
  dedicatedFastPath,
  registerDedicatedRoutes,
  type DedicatedDeps,
  type FastPath,
} from './routes/dedicated.ts';
import type { Catalog } from '@berth/crds';
import type { Dispatcher } from 'undici';
import type { EndpointRuntime } from './endpoints/ports.ts';
import type { EndpointMetrics } from './endpoints/metrics.ts';
import type { RateLimiter } from './proxy/ratelimit.ts';
import type { UsageRecorder } from './proxy/usage.ts';
import type { PlatformUpstream } from './upstream/platform.ts';
import { ApiError } from './errors.ts';
import type { Billing } from './billing/index.ts';
import { registerBillingAdminRoutes, registerBillingRoutes } from './routes/billing.ts';
import type { DashboardAuth } from './auth/index.ts';
import { DEV_IDP_PATH } from './auth/index.ts';
import { apiSessions } from './auth/session.ts';
import { registerAuthRoutes } from './routes/auth.ts';
import { docsApp } from './http/docs.ts';
import { webApp } from './http/web.ts';
import { registerToolAdminRoutes, registerToolRoutes, type ToolRouteDeps } from './routes/tools.ts';
import { registerOlympusRoutes } from './routes/olympus.ts';
import type { RouteMatcher } from './olympus/routing.ts';
import type { OlympusRepository } from './repositories/olympus.ts';
import { registerChronosRoutes, type ChronosRouteDeps } from './routes/chronos.ts';

export const API_VERSION = '0.1.0';

export interface AppDeps {
  config: Pick<Config, 'MAX_BODY_BYTES'> &
    Partial<
      Pick<
        Config,
        | 'PUBLIC_URL'
        | 'TRUST_PROXY'
        | 'WAKE_HOLD_TIMEOUT_MS'
        | 'WAKE_HEARTBEAT_MS'
        | 'REQUEST_TIMEOUT_MS'
        | 'PROXY_RETRIES'
        | 'PUBLIC_RATE_LIMIT_PER_ENDPOINT'
        | 'PUBLIC_RATE_LIMIT_PER_CLIENT'
        | 'MANAGED_TOOL_MAX_STEPS'
      >
    >;
  catalog?: Catalog;
  /** Dedicated endpoints: absent when no runtime is configured (the routes then answer 503). */
  endpoints?: {
    runtime: EndpointRuntime;
    upstream: PlatformUpstream;
    /** The proxy's one HTTP client (proxy/agent.ts). */
    dispatcher: Dispatcher;
    usage: UsageRecorder;
    limiter: RateLimiter;
    /** Per-endpoint series on /metrics. */
    metrics?: EndpointMetrics;
    /** Per-account limits on endpoints and GPUs (none when absent). */
    quotas?: (accountId: string) => Promise<Pick<Quotas, 'endpoints' | 'gpus'>>;
    /** Serializes an account's endpoint writes across API replicas (default: within this process). */
    accountLock?: AccountLock;
  };
  /** Elastic inference: the catalog and the call path (absent: no Elastic routes). */
  elastic?: { catalog: ElasticCatalog; caller: ElasticCaller };
  /** Balances, the ledger, GPU invoices: absent in tests that do not need them (no routes then). */
  billing?: Billing;
  /** The dashboard's sign-in and sessions: absent in tests that do not need them. */
  auth?: DashboardAuth;
  /** The dashboard's static build (apps/web/dist), served at `/` when it exists. */
  webDir?: string;
  /** The tool catalog and per-account enablement: absent in tests that do not need them. */
  tools?: ToolRouteDeps;
  /** Olympus policies: absent in tests that do not need them. */
  olympus?: OlympusRepository;
  /**
   * Olympus's embedding routes (olympus/routing.ts): one matcher, and its cache of example
   * embeddings, for the Elastic routes, the dry run and Chronos (absent: routes are not matched).
   */
  olympusRoutes?: RouteMatcher;
  /** Chronos, scheduled runs: absent in tests that do not need them. */
  chronos?: ChronosRouteDeps;
  adminToken: string;
  keys: KeyService;
  /** GET /admin/accounts (absent in tests that do not need it). */
  accounts?: AccountRepository;
  /** The BERTH_QUOTA_* defaults, for /admin/accounts/{id}/quotas (absent: no such route). */
  quotaDefaults?: Quotas;
  health: HealthRepository;
  metrics: ApiMetrics;
  logger: Logger;
  lifecycle: Lifecycle;
}

export function createApp(deps: AppDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  app.set('trust proxy', deps.config.TRUST_PROXY ?? false);
  const prelude = [requestId(), accessLog(deps.logger, deps.metrics)] as const;
  app.use(...prelude);
  const ep = deps.endpoints;
  const c = deps.config;
  const dedicatedConfig = {
    wakeHoldMs: c.WAKE_HOLD_TIMEOUT_MS ?? 240_000,
    wakeHeartbeatMs: c.WAKE_HEARTBEAT_MS ?? 5_000,
    requestTimeoutMs: c.REQUEST_TIMEOUT_MS ?? 780_000,
    retries: c.PROXY_RETRIES ?? 2,
    publicLimitPerEndpoint: c.PUBLIC_RATE_LIMIT_PER_ENDPOINT ?? 600,
    publicLimitPerClient: c.PUBLIC_RATE_LIMIT_PER_CLIENT ?? 60,
  };
  const dedicatedDeps: DedicatedDeps | undefined =
    ep && deps.catalog
      ? {
          endpoints: ep.runtime.endpoints,
          upstream: ep.upstream,
          dispatcher: ep.dispatcher,
          usage: ep.usage,
          limiter: ep.limiter,
          ...(ep.metrics ? { metrics: ep.metrics } : {}),
          config: dedicatedConfig,
        }
      : undefined;
  // The proxy's hot path first: `/api/d/<id>/…` without walking every router and route before it
  // (routes/dedicated.ts; the registered routes below stay, for everything it leaves to them).
  const fast = dedicatedDeps && dedicatedFastPath(dedicatedDeps, deps.keys, c.MAX_BODY_BYTES);
  if (fast) app.use(fast.middleware);

  const doc = new ApiDoc();
  const ops = express.Router();
  const opsRoutes = new Routes(ops, doc, '');
  registerHealthRoutes(opsRoutes, deps);
  let document = '';
  opsRoutes.add(
    {
      method: 'get',
      path: '/openapi.json',
      tag: 'operations',
      auth: 'none',
      summary: 'This OpenAPI document',
      responses: { 200: { description: 'OpenAPI 3.1, generated from the routes’ own schemas' } },
    },
    ({ res }) => {
      res.type('application/json').send(document);
    },
  );
  opsRoutes.refuseOtherMethods();
  app.use(ops);
  app.use(docsApp());

  const admin = express.Router();
  admin.use(requireAdmin(deps.adminToken), ...jsonBody(deps.config.MAX_BODY_BYTES));
  const adminRoutes = new Routes(admin, doc, '/admin');
  registerAdminRoutes(adminRoutes, deps);
  if (deps.billing) registerBillingAdminRoutes(adminRoutes, { billing: deps.billing });
  if (deps.tools) registerToolAdminRoutes(adminRoutes, deps.tools);
  if (deps.elastic) registerCatalogAdminRoutes(adminRoutes, { catalog: deps.elastic.catalog });
  adminRoutes.refuseOtherMethods();
  app.use('/admin', admin);

  const auth = deps.auth;
  if (auth) {
    app.use(DEV_IDP_PATH, (req, res, next) => {
      const idp = auth.devIdp();
      if (idp) idp(req, res, next);
      else next();
    });
    const signIn = express.Router();
    signIn.use(auth.sessions.middleware, ...jsonBody(deps.config.MAX_BODY_BYTES));
    const signInRoutes = new Routes(signIn, doc, '/auth');
    registerAuthRoutes(signInRoutes, {
      keys: deps.keys,
      signIn: () => auth.signIn(),
      publicUrl: deps.config.PUBLIC_URL,
      logger: deps.logger,
    });
    signInRoutes.refuseOtherMethods();
    app.use('/auth', signIn);
  }

  const api = express.Router();
  if (auth) api.use(apiSessions(auth.sessions));
  // Each route reads its body only once the caller is authenticated (Routes puts it after the key).
  const routes = new Routes(api, doc, '/api', deps.keys, jsonBody(deps.config.MAX_BODY_BYTES));
  registerKeyRoutes(routes, deps);
  if (deps.accounts && deps.quotaDefaults)
    registerQuotaRoutes(routes, {
      keys: deps.keys,
      accounts: deps.accounts,
      defaults: deps.quotaDefaults,
      ...(deps.endpoints ? { endpoints: deps.endpoints.runtime.endpoints } : {}),
    });
  if (deps.billing) registerBillingRoutes(routes, { billing: deps.billing });
  if (deps.tools) registerToolRoutes(routes, deps.tools);
  const olympusRoutes = deps.olympusRoutes;
  const olympusDeps =
    deps.olympus && deps.tools
      ? {
          tools: deps.tools.tools,
          policies: deps.olympus,
          ...(olympusRoutes ? { routes: olympusRoutes } : {}),
        }
      : undefined;
  if (deps.olympus)
    registerOlympusRoutes(routes, {
      olympus: deps.olympus,
      ...(deps.elastic && deps.tools
        ? {
            choose: {
              tools: deps.tools.tools,
              catalog: deps.elastic.catalog,
              live: deps.elastic.caller,
              ...(olympusRoutes ? { routes: olympusRoutes } : {}),
            },
          }
        : {}),
    });
  if (deps.chronos) registerChronosRoutes(routes, deps.chronos);
  if (deps.catalog) registerHardwareRoutes(routes, { catalog: deps.catalog });
  if (deps.elastic)
    registerElasticRoutes(routes, {
      ...deps.elastic,
      requestTimeoutMs: dedicatedConfig.requestTimeoutMs,
      ...(olympusDeps ? { olympus: olympusDeps } : {}),
      ...(deps.tools && deps.billing
        ? {
            managed: {
              tools: deps.tools.tools,
              wallet: deps.billing.wallet,
              maxSteps: c.MANAGED_TOOL_MAX_STEPS ?? 16,
              ...(deps.tools.sealer ? { sealer: deps.tools.sealer } : {}),
            },
          }
        : {}),
      ...(ep
        ? {
            dedicated: {
              endpoints: ep.runtime.endpoints,
              upstream: ep.upstream,
              usage: ep.usage,
              dispatcher: ep.dispatcher,
              ...(ep.metrics ? { metrics: ep.metrics } : {}),
              config: dedicatedConfig,
            },
          }
        : {}),
    });
  if (ep && deps.catalog && dedicatedDeps) {
    registerEndpointRoutes(routes, {
      catalog: deps.catalog,
      publicUrl: c.PUBLIC_URL,
      endpoints: ep.runtime.endpoints,
      logs: ep.runtime.logs,
      upstream: ep.upstream,
      ...(ep.quotas ? { quotas: ep.quotas } : {}),
      ...(ep.accountLock ? { lock: ep.accountLock } : {}),
    });
    registerDedicatedRoutes(routes, dedicatedDeps);
  } else {
    api.all(['/endpoints', '/endpoints/*rest', '/d/*rest'], () => {
      throw new ApiError('service_unavailable', {
        message:
          'Dedicated endpoints are not configured: set KUBECONFIG (or run the API in a cluster), or BERTH_RUNTIME=local for one process on this machine',
      });
    });
  }
  routes.refuseOtherMethods();
  app.use('/api', api);

  const openapi = doc.document(API_VERSION);
  document = JSON.stringify(openapi);
  app.locals.openapi = openapi;
  if (deps.webDir) app.use(webApp(deps.webDir));

  app.use(notFound());
  const errors = errorHandler(deps.logger);
  app.use(errors);
  if (fast) (app as BerthApp)[FAST_ENTRY] = fastEntry(app, fast, prelude, errors);
  return app;
}

const FAST_ENTRY = Symbol('fast entry');
type BerthApp = express.Express & { [FAST_ENTRY]?: (req: IncomingMessage, res: ServerResponse) => boolean };
/** next() for the prelude's middleware: an error is thrown to fastEntry, which answers it. */
const proceed = (err?: unknown) => {
  if (err) throw err;
};

/**
 * The dedicated proxy's fast path ahead of Express itself (requestListener): for a request it takes,
 * what Express's app.handle and router set up (the app's request and response prototypes, `locals`,
 * `originalUrl`), the middleware every request passes first (request id, access log), the route, and
 * errors to the app's own error handler — without Express's per-request dispatch (its final handler,
 * the router's closures and layer walk).
 */
function fastEntry(
  app: express.Express,
  fast: FastPath,
  prelude: readonly RequestHandler[],
  errors: ErrorRequestHandler,
): (req: IncomingMessage, res: ServerResponse) => boolean {
  return (incoming, outgoing) => {
    const route = fast.match(incoming);
    if (!route) return false;
    const req = incoming as express.Request;
    const res = outgoing as express.Response;
    req.res = res;
    res.req = req;
    Object.setPrototypeOf(req, app.request);
    Object.setPrototypeOf(res, app.response);
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
 * The API's HTTP request listener: the dedicated proxy's fast path first (fastEntry), everything
 * else (and every request, for an app without dedicated endpoints) to Express.
 */
export function requestListener(app: express.Express): (req: IncomingMessage, res: ServerResponse) => void {
  const entry = (app as BerthApp)[FAST_ENTRY];
  if (!entry) return app;
  return (req, res) => {
    if (!entry(req, res)) void app(req, res);
  };
}
