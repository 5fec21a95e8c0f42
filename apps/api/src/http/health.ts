import { z } from 'zod';
import { databaseUnavailable, lastLine } from '../platform/db-unavailable.ts';
import type { Routes } from './routes.ts';
import type { ApiMetrics } from '../platform/metrics.ts';
import type { HealthRepository } from '../platform/health-repository.ts';

export interface Lifecycle {
  shuttingDown: boolean;
}

/** Liveness, readiness (database reachable, not shutting down) and Prometheus metrics. */
export function registerHealthRoutes(
  routes: Routes,
  deps: { health: HealthRepository; metrics: ApiMetrics; lifecycle: Lifecycle },
): void {
  routes.add(
    {
      method: 'get',
      path: '/healthz',
      tag: 'operations',
      auth: 'none',
      summary: 'Liveness: the process serves',
      responses: { 200: { description: 'Alive', schema: z.object({ status: z.literal('ok') }) } },
    },
    ({ res }) => {
      res.json({ status: 'ok' });
    },
  );

  const readiness = z.object({
    status: z.enum(['ready', 'not ready']),
    checks: z.record(z.string(), z.string()).describe('`ok`, or what is wrong'),
  });
  routes.add(
    {
      method: 'get',
      path: '/readyz',
      tag: 'operations',
      auth: 'none',
      summary: 'Readiness: the database answers and the process is not shutting down',
      responses: {
        200: { description: 'Ready', schema: readiness },
        503: { description: 'Not ready', schema: readiness },
      },
    },
    async ({ res }) => {
      const checks: Record<string, string> = {};
      try {
        await deps.health.ping();
        checks.database = 'ok';
      } catch (err) {
        checks.database = databaseUnavailable(err) ?? lastLine(err);
      }
      if (deps.lifecycle.shuttingDown) checks.shutdown = 'shutting down';
      const ready = Object.values(checks).every((v) => v === 'ok');
      res.status(ready ? 200 : 503).json({ status: ready ? 'ready' : 'not ready', checks });
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/metrics',
      tag: 'operations',
      auth: 'none',
      summary: 'Prometheus metrics',
      responses: {
        200: { description: 'Text exposition format', schema: z.string(), contentType: 'text/plain' },
      },
    },
    async ({ res }) => {
      res.type(deps.metrics.registry.contentType).send(await deps.metrics.registry.metrics());
    },
  );
}
