import type { Router } from 'express';
import type { HealthRepository } from '../repositories/keys.ts';
import type { ApiMetrics } from '../metrics.ts';

export interface Lifecycle {
  shuttingDown: boolean;
}

/** Liveness, readiness (database reachable, not shutting down) and Prometheus metrics. */
export function registerHealthRoutes(
  router: Router,
  deps: {
    health: HealthRepository;
    metrics: ApiMetrics;
    lifecycle: Lifecycle;
    extraChecks?: Record<string, () => Promise<void>>;
  },
): void {
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', async (_req, res) => {
    const checks: Record<string, string> = {};
    const run = async (name: string, fn: () => Promise<void>) => {
      try {
        await fn();
        checks[name] = 'ok';
      } catch (err) {
        checks[name] = (err as Error).message.split('\n')[0] ?? 'failed';
      }
    };
    await run('database', () => deps.health.ping());
    for (const [name, fn] of Object.entries(deps.extraChecks ?? {})) await run(name, fn);
    if (deps.lifecycle.shuttingDown) checks.shutdown = 'shutting down';
    const ready = Object.values(checks).every((v) => v === 'ok');
    res.status(ready ? 200 : 503).json({ status: ready ? 'ready' : 'not ready', checks });
  });
  router.get('/metrics', async (_req, res) => {
    res.type(deps.metrics.registry.contentType).send(await deps.metrics.registry.metrics());
  });
}
