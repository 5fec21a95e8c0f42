// Prometheus metrics with closed label sets: route templates, methods, status classes, results.
// Never key ids, account ids or raw paths.
import { Counter, Registry, collectDefaultMetrics, type LabelValues } from 'prom-client';

export interface ApiMetrics {
  registry: Registry;
  httpRequests: Counter<'route' | 'method' | 'status'>;
  /** httpRequests from the hot path: add(1, route, method, status). */
  httpRequestCells: CounterCells<'route' | 'method' | 'status'>;
  /** berth_http_request_duration_seconds: observe(seconds, route, method). */
  httpDuration: HistogramCells;
  keyCache: Counter<'result'>;
  /** keyCache from the hot path: add(1, result). */
  keyCacheCells: CounterCells<'result'>;
  keyRevocations: Counter<'outcome'>;
  engineLoadSamples: Counter<'outcome'>;
  olympusRoutes: Counter<'outcome'>;
}

export function createMetrics(): ApiMetrics {
  const registry = new Registry();
  // The event-loop lag histogram samples with a libuv timer; prom-client's default resolution (10 ms)
  // wakes an idle process 100 times a second, most of its idle CPU. 100 ms still resolves lag that matters.
  collectDefaultMetrics({ register: registry, prefix: 'berth_api_', eventLoopMonitoringPrecision: 100 });
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
    httpDuration: new HistogramCells(
      {
        name: 'berth_http_request_duration_seconds',
        help: 'Time to the end of the response, by route template and method',
        labelNames: ['route', 'method'],
        buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600],
      },
      registry,
    ),
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
  private readonly counter: Counter<T>;
  private readonly arity: 1 | 2 | 3;
  private readonly root = new Map<string | number, unknown>();
  private readonly cells: Cell[] = [];
  private readonly names: readonly string[];

  constructor(counter: Counter<T>, arity: 1 | 2 | 3) {
    this.counter = counter;
    this.arity = arity;
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

interface HistogramCell {
  labels: Record<string, string>;
  /** Observations per bucket (the last: above every bound), not cumulative. */
  counts: Float64Array;
  sum: number;
  count: number;
}

/**
 * A prom-client-compatible histogram for the hot path: one cell per label values (two, found through
 * nested maps), observed with a bucket search and three additions — none of prom-client's per-call
 * work (a closure, label validation, a hashed label string). Registered in the registry as a metric
 * of its own; /metrics shows exactly what a prom-client Histogram with the same observations shows
 * (apps/api/test/counter-cells.test.ts compares them).
 */
export class HistogramCells {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly [string, string];
  private readonly bounds: readonly number[];
  private readonly root = new Map<string, Map<string, HistogramCell>>();
  private cells: HistogramCell[] = [];

  constructor(
    config: { name: string; help: string; labelNames: [string, string]; buckets: number[] },
    registry?: Registry,
  ) {
    this.name = config.name;
    this.help = config.help;
    this.labelNames = config.labelNames;
    this.bounds = [...config.buckets].sort((a, b) => a - b);
    registry?.registerMetric(this as unknown as Parameters<Registry['registerMetric']>[0]);
  }

  observe(value: number, a: string, b: string): void {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    let inner = this.root.get(a);
    if (!inner) this.root.set(a, (inner = new Map()));
    let cell = inner.get(b);
    if (!cell) {
      cell = {
        labels: { [this.labelNames[0]]: a, [this.labelNames[1]]: b },
        counts: new Float64Array(this.bounds.length + 1),
        sum: 0,
        count: 0,
      };
      inner.set(b, cell);
      this.cells.push(cell);
    }
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    cell.counts[i]!++;
    cell.sum += value;
    cell.count++;
  }

  /** What prom-client's Histogram hands the registry for the text format (getForPromString). */
  getForPromString() {
    const bucket = `${this.name}_bucket`;
    const values: {
      labels: Record<string, string | number>;
      sharedLabels: Record<string, string>;
      value: number;
      metricName: string;
      exemplar?: null;
    }[] = [];
    for (const cell of this.cells) {
      let acc = 0;
      for (let i = 0; i < this.bounds.length; i++) {
        acc += cell.counts[i]!;
        values.push({
          labels: { le: this.bounds[i]! },
          sharedLabels: cell.labels,
          value: acc,
          metricName: bucket,
          exemplar: null,
        });
      }
      values.push(
        {
          labels: { le: '+Inf' },
          sharedLabels: cell.labels,
          value: cell.count,
          metricName: bucket,
          exemplar: null,
        },
        { labels: {}, sharedLabels: cell.labels, value: cell.sum, metricName: `${this.name}_sum` },
        { labels: {}, sharedLabels: cell.labels, value: cell.count, metricName: `${this.name}_count` },
      );
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  /** The same values with the labels merged (Registry.getMetricsAsJSON, as Histogram.get()). */
  get() {
    const data = this.getForPromString();
    return {
      ...data,
      values: data.values.map(({ sharedLabels, labels, ...v }) => ({
        ...v,
        labels: { ...labels, ...sharedLabels },
      })),
    };
  }

  reset(): void {
    this.root.clear();
    this.cells = [];
  }
}
