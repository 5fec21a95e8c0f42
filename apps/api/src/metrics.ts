// Prometheus metrics with closed label sets: route templates, methods, status classes, results.
// Never key ids, account ids or raw paths.
import { Counter, Histogram, Registry, collectDefaultMetrics, type LabelValues } from 'prom-client';

export interface ApiMetrics {
  registry: Registry;
  httpRequests: Counter<'route' | 'method' | 'status'>;
  /** httpRequests from the hot path: add(1, route, method, status). */
  httpRequestCells: CounterCells<'route' | 'method' | 'status'>;
  httpDuration: Histogram<'route' | 'method'>;
  keyCache: Counter<'result'>;
  /** keyCache from the hot path: add(1, result). */
  keyCacheCells: CounterCells<'result'>;
  keyRevocations: Counter<'outcome'>;
  engineLoadSamples: Counter<'outcome'>;
  olympusRoutes: Counter<'outcome'>;
}

export function createMetrics(): ApiMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'berth_api_' });
  const httpRequests = new Counter({
    name: 'berth_http_requests_total',
    help: 'HTTP requests by route template, method and status code',
    labelNames: ['route', 'method', 'status'],
    registers: [registry],
    collect: (): void => httpRequestCells.flush(),
  });
  const keyCache = new Counter({
    name: 'berth_key_cache_lookups_total',
    help: 'API key verifications by cache result (hit: no database query; stale: verified before a database outage)',
    labelNames: ['result'],
    registers: [registry],
    collect: (): void => keyCacheCells.flush(),
  });
  const httpRequestCells = new CounterCells(httpRequests, 3);
  const keyCacheCells = new CounterCells(keyCache, 1);
  return {
    registry,
    httpRequests,
    httpRequestCells,
    httpDuration: new Histogram({
      name: 'berth_http_request_duration_seconds',
      help: 'Time to the end of the response, by route template and method',
      labelNames: ['route', 'method'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600],
      registers: [registry],
    }),
    keyCache,
    keyCacheCells,
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

interface Cell {
  labels: Record<string, string>;
  pending: number;
  /** Not yet in the counter: flushed even at 0, as inc(labels, 0) would have created the series. */
  fresh: boolean;
}

/**
 * A counter's increments from the hot path, without prom-client's per-call work (label validation,
 * building and hashing a label string, a label object per call): one cell per label values, found
 * through nested maps, added to the counter when it is collected (every scrape, the counter's
 * `collect`), so /metrics shows exactly what inc() would have. Label values in the order of the
 * counter's `labelNames`; a number is its decimal string.
 */
export class CounterCells<T extends string = string> {
  private readonly root = new Map<string | number, unknown>();
  private readonly cells: Cell[] = [];
  private readonly names: readonly string[];

  constructor(
    private readonly counter: Counter<T>,
    private readonly arity: 1 | 2 | 3,
  ) {
    this.names = (counter as unknown as { labelNames: string[] }).labelNames;
    if (this.names.length !== arity)
      throw new Error(`CounterCells: ${arity} labels, not ${this.names.length}`);
  }

  add(by: number, a: string | number, b?: string | number, c?: string | number): void {
    let map = this.root;
    for (let i = 0; i < this.arity - 1; i++) {
      const v = i === 0 ? a : b!;
      let next = map.get(v) as Map<string | number, unknown> | undefined;
      if (!next) map.set(v, (next = new Map()));
      map = next;
    }
    const last = this.arity === 1 ? a : this.arity === 2 ? b! : c!;
    let cell = map.get(last) as Cell | undefined;
    if (!cell) {
      const values = [a, b, c];
      const labels: Record<string, string> = {};
      for (let i = 0; i < this.arity; i++) labels[this.names[i]!] = String(values[i]);
      cell = { labels, pending: 0, fresh: true };
      map.set(last, cell);
      this.cells.push(cell);
    }
    cell.pending += by;
  }

  /** Adds what was counted since the last flush to the counter. */
  flush(): void {
    for (const cell of this.cells) {
      if (cell.pending === 0 && !cell.fresh) continue;
      this.counter.inc(cell.labels as LabelValues<T>, cell.pending);
      cell.pending = 0;
      cell.fresh = false;
    }
  }
}
