// Prometheus metrics with closed label sets: route templates, methods, status classes, results.
// Never key ids, account ids or raw paths.
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface ApiMetrics {
  registry: Registry;
  httpRequests: Counter<'route' | 'method' | 'status'>;
  httpDuration: Histogram<'route' | 'method'>;
  keyCache: Counter<'result'>;
  keyRevocations: Counter<'outcome'>;
  engineLoadSamples: Counter<'outcome'>;
  olympusRoutes: Counter<'outcome'>;
}

export function createMetrics(): ApiMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'berth_api_' });
  return {
    registry,
    httpRequests: new Counter({
      name: 'berth_http_requests_total',
      help: 'HTTP requests by route template, method and status code',
      labelNames: ['route', 'method', 'status'],
      registers: [registry],
    }),
    httpDuration: new Histogram({
      name: 'berth_http_request_duration_seconds',
      help: 'Time to the end of the response, by route template and method',
      labelNames: ['route', 'method'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600],
      registers: [registry],
    }),
    keyCache: new Counter({
      name: 'berth_key_cache_lookups_total',
      help: 'API key verifications by cache result (hit: no database query; stale: verified before a database outage)',
      labelNames: ['result'],
      registers: [registry],
    }),
    keyRevocations: new Counter({
      name: 'berth_key_revocations_total',
      help: 'Key revocations by outcome (confirmed: every replica acknowledged in time)',
      labelNames: ['outcome'],
      registers: [registry],
    }),
    engineLoadSamples: new Counter({
      name: 'berth_engine_load_samples_total',
      help: "Scrapes of an engine replica's /metrics for its load (leastLoad, prefixAffinity), by outcome (ok, failed)",
      labelNames: ['outcome'],
      registers: [registry],
    }),
    olympusRoutes: new Counter({
      name: 'berth_olympus_route_matches_total',
      help: 'Olympus requests whose policy has routes, by how the route embedding went (matched, below_threshold, no_prompt, no_embedding_model, embedding_failed, embedding_timeout)',
      labelNames: ['outcome'],
      registers: [registry],
    }),
  };
}
