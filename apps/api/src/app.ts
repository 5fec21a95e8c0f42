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

export const API_VERSION = '0.1.0';

export interface AppDeps {
  config: Pick<Config, 'MAX_BODY_BYTES' | 'BERTH_MODELS'>;
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
  app.use(requestId(), accessLog(deps.logger, deps.metrics));

  const doc = new ApiDoc();
  const ops = express.Router();
  registerHealthRoutes(ops, deps);
  app.use(ops);

  const admin = express.Router();
  admin.use(requireAdmin(deps.adminToken), ...jsonBody(deps.config.MAX_BODY_BYTES));
  registerAdminRoutes(admin, doc, deps);
  app.use('/admin', admin);

  const api = express.Router();
  api.use(...jsonBody(deps.config.MAX_BODY_BYTES));
  registerKeyRoutes(api, doc, deps);
  registerModelRoutes(api, doc, {
    keys: deps.keys,
    models: deps.config.BERTH_MODELS,
    created: Math.floor(Date.now() / 1000),
  });
  app.use('/api', api);

  const document = JSON.stringify(doc.document(API_VERSION));
  app.get('/openapi.json', (_req, res) => {
    res.type('application/json').send(document);
  });

  app.use(notFound());
  app.use(errorHandler(deps.logger));
  return app;
}
