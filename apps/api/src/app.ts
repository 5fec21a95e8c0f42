// The Express application, assembled from its parts. Tests and the server both call createApp.
import express from 'express';
import type { Logger } from 'pino';
import type { Config } from './config.ts';
import { accessLog, errorHandler, jsonBody, notFound, requestId } from './http/middleware.ts';
import { requireAdmin } from './http/auth.ts';
import type { KeyService } from './keys/service.ts';
import type { ApiMetrics } from './metrics.ts';
import { ApiDoc } from './openapi.ts';
import type { HealthRepository } from './repositories/keys.ts';
import { registerAdminRoutes } from './routes/admin.ts';
import { registerHealthRoutes, type Lifecycle } from './routes/health.ts';
import { registerKeyRoutes } from './routes/keys.ts';
import { registerModelRoutes } from './routes/models.ts';
import { registerHardwareRoutes } from './routes/hardware.ts';
import { registerEndpointRoutes } from './routes/endpoints.ts';
import { registerDedicatedRoutes } from './routes/dedicated.ts';
import type { Catalog } from '@berth/crds';
import type { EndpointRuntime } from './endpoints/index.ts';
import type { RateLimiter } from './proxy/ratelimit.ts';
import type { UsageRecorder } from './proxy/usage.ts';
import { ApiError } from './errors.ts';
import type { Billing } from './billing/index.ts';
import { registerBillingAdminRoutes, registerBillingRoutes } from './routes/billing.ts';

export const API_VERSION = '0.1.0';

export interface AppDeps {
  config: Pick<Config, 'MAX_BODY_BYTES' | 'BERTH_MODELS'> &
    Partial<
      Pick<
        Config,
        | 'PUBLIC_URL'
        | 'TRUST_PROXY'
        | 'WAKE_HOLD_TIMEOUT_MS'
        | 'REQUEST_TIMEOUT_MS'
        | 'PROXY_RETRIES'
        | 'PUBLIC_RATE_LIMIT_PER_ENDPOINT'
        | 'PUBLIC_RATE_LIMIT_PER_CLIENT'
      >
    >;
  catalog?: Catalog;
  /** Dedicated endpoints: absent when no runtime is configured (the routes then answer 503). */
  endpoints?: { runtime: EndpointRuntime; usage: UsageRecorder; limiter: RateLimiter };
  /** Balances, the ledger, GPU invoices: absent in tests that do not need them (no routes then). */
  billing?: Billing;
  adminToken: string;
  keys: KeyService;
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
  app.use(requestId(), accessLog(deps.logger, deps.metrics));

  const doc = new ApiDoc();
  const ops = express.Router();
  registerHealthRoutes(ops, deps);
  app.use(ops);

  const admin = express.Router();
  admin.use(requireAdmin(deps.adminToken), ...jsonBody(deps.config.MAX_BODY_BYTES));
  registerAdminRoutes(admin, doc, deps);
  if (deps.billing) registerBillingAdminRoutes(admin, doc, { billing: deps.billing });
  app.use('/admin', admin);

  const api = express.Router();
  api.use(...jsonBody(deps.config.MAX_BODY_BYTES));
  registerKeyRoutes(api, doc, deps);
  if (deps.billing) registerBillingRoutes(api, doc, { keys: deps.keys, billing: deps.billing });
  registerModelRoutes(api, doc, {
    keys: deps.keys,
    models: deps.config.BERTH_MODELS,
    created: Math.floor(Date.now() / 1000),
  });
  if (deps.catalog) registerHardwareRoutes(api, doc, { keys: deps.keys, catalog: deps.catalog });
  const ep = deps.endpoints;
  if (ep && deps.catalog) {
    const c = deps.config;
    registerEndpointRoutes(api, doc, {
      keys: deps.keys,
      catalog: deps.catalog,
      publicUrl: c.PUBLIC_URL,
      ...ep.runtime,
    });
    registerDedicatedRoutes(api, doc, {
      keys: deps.keys,
      ...ep.runtime,
      usage: ep.usage,
      limiter: ep.limiter,
      config: {
        wakeHoldMs: c.WAKE_HOLD_TIMEOUT_MS ?? 240_000,
        requestTimeoutMs: c.REQUEST_TIMEOUT_MS ?? 780_000,
        retries: c.PROXY_RETRIES ?? 2,
        publicLimitPerEndpoint: c.PUBLIC_RATE_LIMIT_PER_ENDPOINT ?? 600,
        publicLimitPerClient: c.PUBLIC_RATE_LIMIT_PER_CLIENT ?? 60,
      },
    });
  } else {
    api.all(['/endpoints', '/endpoints/*rest', '/d/*rest'], () => {
      throw new ApiError('service_unavailable', {
        message:
          'Dedicated endpoints are not configured: set KUBECONFIG (or run the API in a cluster), or BERTH_RUNTIME=local for one process on this machine',
      });
    });
  }
  app.use('/api', api);

  const document = JSON.stringify(doc.document(API_VERSION));
  app.get('/openapi.json', (_req, res) => {
    res.type('application/json').send(document);
  });

  app.use(notFound());
  app.use(errorHandler(deps.logger));
  return app;
}
