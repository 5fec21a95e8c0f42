// The Express application, assembled from its parts. Tests and the server both call createApp, with
// the parsed configuration (platform/config.ts: every setting and default has its one home there) and
// the services of the products it serves; a product left out has no routes (dedicated endpoints' then
// answer 503).
import express from 'express';
import type { Catalog } from '@berth/crds';
import type { Dispatcher } from 'undici';
import type { Config } from './platform/config.ts';
import { ApiError } from './platform/errors.ts';
import type { Logger } from './platform/logger.ts';
import type { ApiMetrics } from './platform/metrics.ts';
import type { HealthRepository } from './platform/health-repository.ts';
import { requireAdmin } from './http/auth.ts';
import { docsApp } from './http/docs.ts';
import { attachFastEntry, fastRouteTable, firstFast, type FastRoutes } from './http/fast-entry.ts';
import { registerHealthRoutes, type Lifecycle } from './http/health.ts';
import { accessLog, errorHandler, jsonBody, jsonBodyReader, notFound, requestId } from './http/middleware.ts';
import { ApiDoc } from './http/openapi.ts';
import { Routes } from './http/routes.ts';
import { apiSessions } from './http/session.ts';
import { webApp } from './http/web.ts';
import { registerAdminRoutes } from './accounts/admin-routes.ts';
import { registerKeyRoutes } from './accounts/keys/routes.ts';
import type { KeyService } from './accounts/keys/service.ts';
import { registerQuotaRoutes } from './accounts/quota-routes.ts';
import { configuredQuotas, effectiveQuotas, type AccountLock } from './accounts/quotas.ts';
import type { AccountRepository } from './accounts/repository.ts';
import { DEV_IDP_PATH, type DashboardAuth } from './accounts/sign-in/dashboard-auth.ts';
import { registerAuthRoutes } from './accounts/sign-in/routes.ts';
import { registerBillingAdminRoutes } from './billing/admin-routes.ts';
import type { Billing } from './billing/index.ts';
import { registerBillingRoutes } from './billing/routes.ts';
import { callConfig, type DedicatedDeps } from './dedicated/call.ts';
import { registerHardwareRoutes } from './dedicated/hardware-routes.ts';
import type { EndpointMetrics } from './dedicated/metrics.ts';
import type { EndpointRuntime } from './dedicated/ports.ts';
import type { RateLimiter } from './dedicated/proxy/ratelimit.ts';
import type { UsageRecorder } from './dedicated/proxy/usage.ts';
import { registerEndpointRoutes } from './dedicated/routes.ts';
import type { PlatformUpstream } from './dedicated/upstream/endpoint-upstream.ts';
import { registerCatalogAdminRoutes } from './elastic/admin-routes.ts';
import type { ElasticCaller } from './elastic/call.ts';
import type { ElasticCatalog } from './elastic/catalog.ts';
import { registerToolAdminRoutes, registerToolRoutes, type ToolRouteDeps } from './tools/routes.ts';
import type { OlympusRepository } from './olympus/repository.ts';
import { registerOlympusRoutes } from './olympus/routes.ts';
import type { RouteMatcher } from './olympus/routing.ts';
import type { Chronos } from './chronos/index.ts';
import { registerChronosRoutes } from './chronos/routes.ts';
import { registerDedicatedRoutes } from './inference/dedicated-routes.ts';
import { dedicatedFastPath } from './inference/fast-path.ts';
import { registerInferenceRoutes, type InferenceDeps } from './inference/routes.ts';

export const API_VERSION = '0.1.0';

/** Dedicated endpoints: where they run, the proxy's upstream and client, usage, Public rate limits. */
export interface DedicatedServices {
  runtime: EndpointRuntime;
  upstream: PlatformUpstream;
  /** The proxy's one HTTP client (dedicated/proxy/agent.ts). */
  dispatcher: Dispatcher;
  usage: UsageRecorder;
  limiter: RateLimiter;
  /** Per-endpoint series on /metrics. */
  metrics?: EndpointMetrics;
  /** Serializes an account's endpoint writes across API replicas (default: within this process). */
  accountLock?: AccountLock;
}

export interface AppDeps {
  /** The parsed configuration. */
  config: Config;
  logger: Logger;
  metrics: ApiMetrics;
  lifecycle: Lifecycle;
  health: HealthRepository;
  adminToken: string;
  keys: KeyService;
  /** The operator's account list and every account's quotas (with quotas, endpoints' limits). */
  accounts?: AccountRepository;
  /** The instance-type catalog: GET /api/hardware, and dedicated endpoints' hardware. */
  catalog?: Catalog;
  /** Dedicated endpoints (absent, or without `catalog`: their routes answer 503). */
  endpoints?: DedicatedServices;
  /** Elastic inference: the catalog and the call path (absent: no front door, no catalog admin). */
  elastic?: { catalog: ElasticCatalog; caller: ElasticCaller };
  /** Balances, the ledger, GPU invoices (with tools and Elastic: managed tools). */
  billing?: Billing;
  /** The dashboard's sign-in and sessions. */
  auth?: DashboardAuth;
  /** The dashboard's static build (apps/web/dist), served at `/` when it exists. */
  webDir?: string;
  /** The tool catalog and per-account enablement. */
  tools?: ToolRouteDeps;
  /** Olympus: the accounts' policies, and one matcher of their embedding routes (with tools). */
  olympus?: { policies: OlympusRepository; routes?: RouteMatcher };
  /** Chronos, scheduled runs (with tools and Elastic). */
  chronos?: Chronos;
}

export function createApp(deps: AppDeps): express.Express {
  const { config } = deps;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  app.set('trust proxy', config.TRUST_PROXY);
  const prelude = [requestId(), accessLog(deps.logger, deps.metrics)] as const;
  app.use(...prelude);
  const dedicated = dedicatedDeps(deps);
  // The proxy's hot path first: `/api/d/<id>/…` without walking every router and route before it
  // (inference/fast-path.ts; the registered routes below stay, for everything it leaves to them).
  const fast =
    dedicated && deps.catalog ? dedicatedFastPath(dedicated, deps.keys, config.MAX_BODY_BYTES) : undefined;
  if (fast) app.use(fast.middleware);

  const doc = new ApiDoc();
  const ops = opsRouter(deps, doc);
  app.use(ops.router);
  app.use(docsApp());
  app.use('/admin', adminRouter(deps, doc));
  const auth = deps.auth;
  if (auth) {
    app.use(DEV_IDP_PATH, (req, res, next) => {
      const idp = auth.devIdp();
      if (idp) idp(req, res, next);
      else next();
    });
    app.use('/auth', signInRouter(deps, auth, doc));
  }
  const api = apiRouter(deps, doc, dedicated);
  app.use('/api', api.router);

  const openapi = doc.document(API_VERSION);
  ops.publish(JSON.stringify(openapi));
  app.locals.openapi = openapi;
  if (deps.webDir) app.use(webApp(deps.webDir));

  app.use(notFound());
  const errors = errorHandler(deps.logger);
  app.use(errors);
  // Ahead of Express: the dedicated proxy's path, then the front door's fast routes (RouteSpec.fast).
  const hot: FastRoutes<unknown>[] = [
    ...(fast ? [fast] : []),
    ...(api.fast.size ? [fastRouteTable(api.fast)] : []),
  ];
  if (hot.length) attachFastEntry(app, firstFast(hot), prelude, errors);
  return app;
}

/** What calling dedicated endpoints needs (their routes need the hardware catalog too). */
function dedicatedDeps(deps: AppDeps): DedicatedDeps | undefined {
  const ep = deps.endpoints;
  if (!ep) return undefined;
  return {
    endpoints: ep.runtime.endpoints,
    upstream: ep.upstream,
    dispatcher: ep.dispatcher,
    usage: ep.usage,
    limiter: ep.limiter,
    ...(ep.metrics ? { metrics: ep.metrics } : {}),
    config: callConfig(deps.config),
  };
}

/** Health, readiness, metrics and the OpenAPI document (published once every route is declared). */
function opsRouter(deps: AppDeps, doc: ApiDoc): { router: express.Router; publish(document: string): void } {
  const ops = express.Router();
  let document = '';
  const routes = new Routes(ops, doc, '');
  registerHealthRoutes(routes, deps);
  routes.add(
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
  routes.refuseOtherMethods();
  return { router: ops, publish: (text) => void (document = text) };
}

/** /admin: the operator's ADMIN_TOKEN. */
function adminRouter(deps: AppDeps, doc: ApiDoc): express.Router {
  const admin = express.Router();
  admin.use(requireAdmin(deps.adminToken), ...jsonBody(deps.config.MAX_BODY_BYTES));
  const routes = new Routes(admin, doc, '/admin');
  registerAdminRoutes(routes, {
    keys: deps.keys,
    ...(deps.accounts ? { accounts: deps.accounts, quotaDefaults: configuredQuotas(deps.config) } : {}),
  });
  if (deps.billing) registerBillingAdminRoutes(routes, { billing: deps.billing });
  if (deps.tools) registerToolAdminRoutes(routes, deps.tools);
  if (deps.elastic) registerCatalogAdminRoutes(routes, { catalog: deps.elastic.catalog });
  routes.refuseOtherMethods();
  return admin;
}

/** /auth: the dashboard's sign-in. */
function signInRouter(deps: AppDeps, auth: DashboardAuth, doc: ApiDoc): express.Router {
  const signIn = express.Router();
  signIn.use(auth.sessions.middleware, ...jsonBody(deps.config.MAX_BODY_BYTES));
  const routes = new Routes(signIn, doc, '/auth');
  registerAuthRoutes(routes, {
    keys: deps.keys,
    signIn: () => auth.signIn(),
    publicUrl: deps.config.PUBLIC_URL,
    logger: deps.logger,
  });
  routes.refuseOtherMethods();
  return signIn;
}

/** /api: keys, quotas, billing, tools, Olympus, Chronos, hardware, the front door, endpoints. */
function apiRouter(
  deps: AppDeps,
  doc: ApiDoc,
  dedicated: DedicatedDeps | undefined,
): { router: express.Router; fast: Routes['fast'] } {
  const { config, tools, elastic } = deps;
  const api = express.Router();
  if (deps.auth) api.use(apiSessions(deps.auth.sessions));
  // Each route reads its body only once the caller is authenticated (Routes puts it after the key).
  const routes = new Routes(
    api,
    doc,
    '/api',
    deps.keys,
    jsonBody(config.MAX_BODY_BYTES),
    jsonBodyReader(config.MAX_BODY_BYTES),
  );
  registerKeyRoutes(routes, deps);
  if (deps.accounts)
    registerQuotaRoutes(routes, {
      keys: deps.keys,
      accounts: deps.accounts,
      defaults: configuredQuotas(config),
      ...(deps.endpoints ? { endpoints: deps.endpoints.runtime.endpoints } : {}),
      ...(deps.chronos ? { chronosRuns: deps.chronos.repo.count } : {}),
    });
  if (deps.billing) registerBillingRoutes(routes, { billing: deps.billing });
  if (tools) registerToolRoutes(routes, tools);
  const olympus = deps.olympus;
  if (olympus)
    registerOlympusRoutes(routes, {
      olympus: olympus.policies,
      ...(elastic && tools
        ? {
            choose: {
              tools: tools.tools,
              catalog: elastic.catalog,
              live: elastic.caller,
              ...(olympus.routes ? { routes: olympus.routes } : {}),
            },
          }
        : {}),
    });
  if (deps.chronos && tools && elastic)
    registerChronosRoutes(routes, { chronos: deps.chronos, tools: tools.tools, catalog: elastic.catalog });
  if (deps.catalog)
    registerHardwareRoutes(routes, {
      catalog: deps.catalog,
      ...(deps.billing ? { currency: deps.billing.currency } : {}),
    });
  if (elastic) registerInferenceRoutes(routes, inferenceDeps(deps, elastic, dedicated));
  if (deps.endpoints && deps.catalog && dedicated) {
    const ep = deps.endpoints;
    const accounts = deps.accounts;
    const defaults = configuredQuotas(config);
    registerEndpointRoutes(routes, {
      catalog: deps.catalog,
      publicUrl: config.PUBLIC_URL,
      endpoints: ep.runtime.endpoints,
      logs: ep.runtime.logs,
      upstream: ep.upstream,
      ...(accounts
        ? { quotas: async (accountId: string) => effectiveQuotas(defaults, await accounts.quotas(accountId)) }
        : {}),
      ...(ep.accountLock ? { lock: ep.accountLock } : {}),
    });
    registerDedicatedRoutes(routes, dedicated);
  } else {
    api.all(['/endpoints', '/endpoints/*rest', '/d/*rest'], () => {
      throw new ApiError('service_unavailable', {
        message:
          'Dedicated endpoints are not configured: set KUBECONFIG (or run the API in a cluster), or BERTH_RUNTIME=local for one process on this machine',
      });
    });
  }
  routes.refuseOtherMethods();
  return { router: api, fast: routes.fast };
}

/** The front door's parts: Elastic, and the dedicated endpoints, Olympus and managed tools there are. */
function inferenceDeps(
  deps: AppDeps,
  elastic: NonNullable<AppDeps['elastic']>,
  dedicated: DedicatedDeps | undefined,
): InferenceDeps {
  const { tools, olympus, billing } = deps;
  return {
    ...elastic,
    requestTimeoutMs: deps.config.REQUEST_TIMEOUT_MS,
    ...(olympus && tools
      ? {
          olympus: {
            tools: tools.tools,
            policies: olympus.policies,
            ...(olympus.routes ? { routes: olympus.routes } : {}),
          },
        }
      : {}),
    ...(tools && billing
      ? {
          managed: {
            tools: tools.tools,
            wallet: billing.wallet,
            maxSteps: deps.config.MANAGED_TOOL_MAX_STEPS,
            maxResponseBytes: deps.config.MANAGED_TOOL_MAX_RESPONSE_BYTES,
            ...(tools.sealer ? { sealer: tools.sealer } : {}),
          },
        }
      : {}),
    ...(dedicated ? { dedicated } : {}),
  };
}
