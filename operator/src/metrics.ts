import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PHASES } from '@berth/crds';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

// Closed label vocabularies only: result ∈ queue outcomes, phase ∈ PHASES, kind ∈ informer kinds.

export function createMetrics() {
  const registry = new Registry();
  // The event-loop lag histogram samples with a libuv timer; prom-client's default resolution (10 ms)
  // wakes an idle process 100 times a second, most of its idle CPU. 100 ms still resolves lag that matters.
  collectDefaultMetrics({ register: registry, prefix: 'berth_operator_', eventLoopMonitoringPrecision: 100 });
  const metrics = {
    registry,
    reconciles: new Counter({
      name: 'berth_operator_reconciles_total',
      help: 'Reconcile passes by result',
      labelNames: ['result'] as const,
      registers: [registry],
    }),
    errors: new Counter({
      name: 'berth_operator_errors_total',
      help: 'Errors by where they happened',
      labelNames: ['where'] as const,
      registers: [registry],
    }),
    queueDepth: new Gauge({
      name: 'berth_operator_queue_depth',
      help: 'Keys waiting in the work queue',
      registers: [registry],
    }),
    endpoints: new Gauge({
      name: 'berth_operator_endpoints',
      help: 'Endpoints per phase',
      labelNames: ['phase'] as const,
      registers: [registry],
    }),
    wakeDuration: new Histogram({
      name: 'berth_operator_wake_duration_seconds',
      help: 'From wake request to a Ready replica',
      buckets: [1, 5, 10, 20, 30, 60, 120, 300, 600],
      registers: [registry],
    }),
    replicaStart: new Histogram({
      name: 'berth_operator_replica_start_seconds',
      help: 'Replica start by stage: scheduled, image_ready, engine_ready (weights loaded, serving), total',
      labelNames: ['stage'] as const,
      buckets: [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800],
      registers: [registry],
    }),
    wakeStage: new Histogram({
      name: 'berth_endpoint_wake_stage_seconds',
      help: 'A wake by stage (status.lastWake): signal (request → replica count written), scheduled, image (container running), engine (ready), total (request → ready)',
      labelNames: ['stage'] as const,
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600],
      registers: [registry],
    }),
    reconcileDuration: new Histogram({
      name: 'berth_operator_reconcile_duration_seconds',
      help: 'Duration of one reconcile pass',
      buckets: [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10],
      registers: [registry],
    }),
    writes: new Counter({
      name: 'berth_operator_api_writes_total',
      help: 'Writes to the Kubernetes API by resource (a resync with nothing drifted writes nothing)',
      labelNames: ['resource'] as const,
      registers: [registry],
    }),
    watchEvents: new Counter({
      name: 'berth_operator_watch_events_total',
      help: 'Watch events of endpoints and their children: enqueued a pass, echo of our own write, or unchanged in what a pass reads',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    wakeHints: new Counter({
      name: 'berth_operator_wake_hints_total',
      help: "The API's direct wake signals (POST /wake) by answer: accepted, awake, stale, unknown, not_leader, unauthorized, bad_request",
      labelNames: ['result'] as const,
      registers: [registry],
    }),
    leader: new Gauge({
      name: 'berth_operator_leader',
      help: '1 while this replica holds the lease',
      registers: [registry],
    }),
  };
  for (const p of PHASES) metrics.endpoints.set({ phase: p }, 0);
  return metrics;
}

export type Metrics = ReturnType<typeof createMetrics>;

/**
 * /metrics, /healthz (process alive), /readyz (caches synced, or standing by as a follower), and
 * whatever `route` serves (POST /wake).
 */
export async function serveMetrics(
  metrics: Metrics,
  port: number,
  ready: () => boolean,
  route?: (req: IncomingMessage, res: ServerResponse) => boolean,
): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    if (route?.(req, res)) return;
    if (req.url === '/metrics') {
      metrics.registry
        .metrics()
        .then((body) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(body))
        .catch((err: Error) => res.writeHead(500).end(err.message));
    } else if (req.url === '/healthz') res.writeHead(200).end('ok');
    else if (req.url === '/readyz') {
      if (ready()) res.writeHead(200).end('ok');
      else res.writeHead(503).end('not ready');
    } else res.writeHead(404).end();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, resolve);
  });
  return { server, port: (server.address() as AddressInfo).port };
}
