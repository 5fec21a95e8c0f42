// Per-endpoint series for a platform team. The one free-form label is the endpoint id, bounded by the
// number of endpoints (series of a deleted endpoint go with it at the next scrape); never key ids,
// account ids, model names or messages.
import { PHASES, type WakeReceipt } from '@berth/crds';
import { wakeStages } from '@berth/operator/local';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { EndpointCache } from './ports.ts';
import { CounterCells } from '../platform/metrics.ts';

export interface EndpointMetrics {
  /** A call held while its endpoint wakes: +1 now, -1 from the returned function. */
  held(id: string): () => void;
  /** A proxied call's final HTTP status. */
  proxied(id: string, status: number): void;
  tokens(id: string, prompt: number, completion: number): void;
  /** From this API's wake signal to the first Ready replica it saw. */
  woken(id: string, seconds: number): void;
  /** From the first Ready replica this API saw to the first byte of a held call's answer, once per wake. */
  firstByte(id: string, seconds: number): void;
}

const DURATION_BUCKETS = [1, 5, 10, 20, 30, 60, 120, 300, 600, 1200];
/** Berth's own share of a wake is tens of milliseconds (BENCHMARKS.md, `npm run bench wake`). */
const FIRST_BYTE_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

export function endpointMetrics(registry: Registry, endpoints: Pick<EndpointCache, 'list'>): EndpointMetrics {
  // A build is seen starting (status.buildingSince, cleared once up) and ending (status.upSince) by
  // the scrapes in between: a build shorter than the scrape interval is not observed.
  const builds = new Map<string, string>();
  const buildDuration = new Histogram({
    name: 'berth_endpoint_build_duration_seconds',
    help: 'From the start of a build to its first Ready replica, by endpoint (observed at scrape time)',
    labelNames: ['endpoint'],
    buckets: DURATION_BUCKETS,
    registers: [registry],
  });
  new Gauge({
    name: 'berth_endpoint_phase',
    help: 'Phase of each endpoint: 1 for the current one',
    labelNames: ['endpoint', 'phase'],
    registers: [registry],
    collect() {
      this.reset();
      const seen = new Set<string>();
      for (const e of endpoints.list()) {
        const id = e.metadata.name;
        seen.add(id);
        const phase = e.status?.phase ?? 'building';
        for (const p of PHASES) this.set({ endpoint: id, phase: p }, p === phase ? 1 : 0);
        const since = e.status?.buildingSince;
        if (phase === 'building' && since) builds.set(id, since);
        const started = builds.get(id);
        const up = e.status?.upSince;
        if (phase === 'up' && started && up && Date.parse(up) >= Date.parse(started)) {
          buildDuration.observe({ endpoint: id }, (Date.parse(up) - Date.parse(started)) / 1000);
          builds.delete(id);
        }
      }
      for (const id of builds.keys()) if (!seen.has(id)) builds.delete(id);
    },
  });
  const held = new Gauge({
    name: 'berth_endpoint_held_requests',
    help: 'Calls held while their endpoint wakes, by endpoint',
    labelNames: ['endpoint'],
    registers: [registry],
  });
  // Counted per call through cells (platform/metrics.ts), added to the counters at each scrape.
  const requests = new Counter({
    name: 'berth_endpoint_requests_total',
    help: 'Proxied calls by endpoint and HTTP status code',
    labelNames: ['endpoint', 'code'],
    registers: [registry],
    collect: (): void => requestCells.flush(),
  });
  const tokens = new Counter({
    name: 'berth_endpoint_tokens_total',
    help: 'Tokens of proxied calls by endpoint and kind (prompt, completion)',
    labelNames: ['endpoint', 'kind'],
    registers: [registry],
    collect: (): void => tokenCells.flush(),
  });
  const requestCells = new CounterCells(requests, 2);
  const tokenCells = new CounterCells(tokens, 2);
  const wake = new Histogram({
    name: 'berth_endpoint_wake_duration_seconds',
    help: "From this API's wake signal to the first Ready replica it saw, by endpoint",
    labelNames: ['endpoint'],
    buckets: DURATION_BUCKETS,
    registers: [registry],
  });
  const firstByte = new Histogram({
    name: 'berth_endpoint_wake_first_byte_seconds',
    help: "From the first Ready replica this API saw to the first byte of a held call's answer forwarded, by endpoint (once per wake; the engine's time to first token included)",
    labelNames: ['endpoint'],
    buckets: FIRST_BYTE_BUCKETS,
    registers: [registry],
  });
  return {
    held(id) {
      held.inc({ endpoint: id });
      let done = false;
      return () => {
        if (!done) held.dec({ endpoint: id });
        done = true;
      };
    },
    proxied: (id, status) => requestCells.add(1, id, status),
    tokens(id, prompt, completion) {
      tokenCells.add(prompt, id, 'prompt');
      tokenCells.add(completion, id, 'completion');
    },
    woken: (id, seconds) => wake.observe({ endpoint: id }, seconds),
    firstByte: (id, seconds) => firstByte.observe({ endpoint: id }, seconds),
  };
}

/**
 * Local mode's `berth_endpoint_wake_stage_seconds{stage}`: each completed wake's receipt by stage, as
 * the operator exports it on Kubernetes (the reconciler runs in this process here).
 */
export function wakeStageMetrics(registry: Registry): (receipt: WakeReceipt) => void {
  const h = new Histogram({
    name: 'berth_endpoint_wake_stage_seconds',
    help: 'A wake by stage (status.lastWake): signal (request → replica count written), scheduled, image (process started), engine (ready), total (request → ready)',
    labelNames: ['stage'],
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600],
    registers: [registry],
  });
  return (receipt) => {
    for (const [stage, seconds] of Object.entries(wakeStages(receipt))) h.observe({ stage }, seconds);
  };
}
