// The engines' own view of their load, for leastLoad and prefixAffinity. Each API replica counts only
// the calls it has in flight itself; with several API replicas, a replica busy with the others'
// traffic looks idle. So, for endpoints that had calls recently, every `intervalMs` this process
// scrapes each replica's `/metrics` (vLLM's `vllm:num_requests_running` + `vllm:num_requests_waiting`,
// summed over their label sets) on one kept-alive connection per replica, and stores on the replica
//
//   others = max(0, running + waiting − this process's own in-flight calls there at sample time)
//
// which the pickers add to their own count (`ReplicaLoad.others`). Off the request path: a pick reads
// two numbers. A sample older than STALE_INTERVALS intervals (the engine stopped answering its
// scrapes, or the endpoint went quiet) counts as nothing, so the load decays to this process's own
// count. roundRobin endpoints are never scraped.
import { Agent, request } from 'undici';
import type { Logger } from 'pino';
import type { ReplicaLoad, ReplicaSet } from './replicas.ts';

/** A sample this many intervals old is ignored (load falls back to this replica's own count). */
export const STALE_INTERVALS = 3;
/** An endpoint is sampled while it had a call within this many intervals (at least ACTIVE_MIN_MS). */
export const ACTIVE_INTERVALS = 30;
const ACTIVE_MIN_MS = 30_000;
/** A metrics page larger than this is not read (a real vLLM's is tens of kB). */
const MAX_METRICS_BYTES = 4 << 20;

const RUNNING = 'vllm:num_requests_running';
const WAITING = 'vllm:num_requests_waiting';

export type SampleOutcome = 'ok' | 'failed';

export interface EngineLoadOptions {
  /** Scrape interval in milliseconds; 0 turns sampling off (loads are this process's own counts). */
  intervalMs: number;
  /** The current replica set of an endpoint (ReplicaTable.of). */
  replicas: (id: string) => ReplicaSet;
  logger: Logger;
  /** Once per scrape of one replica (metrics). */
  onSample?: (outcome: SampleOutcome) => void;
  /** Scrape timeout; default half the interval, within 250–1000 ms. */
  timeoutMs?: number;
}

export interface EngineLoadSampler {
  /**
   * A call for the endpoint arrived (leastLoad or prefixAffinity): keep sampling it. Cheap enough for
   * every call (a Map write of a small integer); the first call after a quiet spell starts the timer.
   */
  use(id: string): void;
  /** One round now: decay stale samples, scrape the active endpoints' replicas; resolves when done. */
  tick(now?: number): Promise<void>;
  /** Endpoints being sampled. */
  readonly active: number;
  close(): Promise<void>;
}

/** Sums the values of every sample of `name` (any labels) in a Prometheus text page. */
export function gaugeSum(text: string, name: string): number | undefined {
  let sum: number | undefined;
  let at = 0;
  for (;;) {
    at = text.indexOf(name, at);
    if (at === -1) return sum;
    const lineStart = at === 0 || text.charCodeAt(at - 1) === 10;
    const next = text.charCodeAt(at + name.length);
    const end = text.indexOf('\n', at);
    const lineEnd = end === -1 ? text.length : end;
    // `name{…} v` or `name v` at the start of a line; not `# HELP name` nor `name_other`
    if (lineStart && (next === 123 /* { */ || next === 32) /* space */) {
      const v = Number(text.slice(text.lastIndexOf(' ', lineEnd - 1) + 1, lineEnd));
      if (Number.isFinite(v)) sum = (sum ?? 0) + v;
    }
    at = lineEnd;
  }
}

/**
 * The load of other API replicas on one replica, from an engine sample: what the engine reports
 * beyond this process's own calls. `ownAtSend` / `ownNow`: this process's in-flight count when the
 * scrape was sent and when its answer came; the larger is used, so a call of ours that started or
 * ended during the scrape is never taken for someone else's.
 */
export function othersFromSample(engineLoad: number, ownAtSend: number, ownNow: number): number {
  return Math.max(0, engineLoad - Math.max(ownAtSend, ownNow));
}

export function engineLoadSampler(o: EngineLoadOptions): EngineLoadSampler {
  const interval = o.intervalMs;
  const timeout = o.timeoutMs ?? Math.min(1000, Math.max(250, interval / 2));
  const activeTicks = Math.max(ACTIVE_INTERVALS, Math.ceil(ACTIVE_MIN_MS / Math.max(interval, 1)));
  /** Endpoint id → the tick of its last call. */
  const lastUse = new Map<string, number>();
  let tickNo = 0;
  let timer: NodeJS.Timeout | undefined;
  let closed = false;
  /** One connection per replica, kept alive across intervals. */
  const agent = new Agent({
    connections: 1,
    pipelining: 1,
    keepAliveTimeout: Math.max(10_000, 4 * interval),
  });
  const inFlight = new Set<ReplicaLoad>();
  /** Replicas whose last scrape failed (their first failure is logged, and their recovery). */
  const failing = new WeakSet<ReplicaLoad>();

  const scrape = async (r: ReplicaLoad): Promise<void> => {
    if (inFlight.has(r)) return; // the previous scrape is still waiting for its timeout
    inFlight.add(r);
    const ownAtSend = r.inFlight;
    try {
      const res = await request(r.origin + '/metrics', {
        dispatcher: agent,
        headersTimeout: timeout,
        bodyTimeout: timeout,
        signal: AbortSignal.timeout(timeout),
      });
      const length = Number(res.headers['content-length'] ?? 0);
      if (res.statusCode !== 200 || length > MAX_METRICS_BYTES) {
        await res.body.dump();
        throw new Error(`HTTP ${res.statusCode}${length > MAX_METRICS_BYTES ? ` (${length} bytes)` : ''}`);
      }
      const text = await res.body.text();
      const running = gaugeSum(text, RUNNING);
      const waiting = gaugeSum(text, WAITING);
      if (running === undefined && waiting === undefined) throw new Error(`no ${RUNNING} in /metrics`);
      if (closed) return; // closed while this scrape was on its way
      r.others = othersFromSample((running ?? 0) + (waiting ?? 0), ownAtSend, r.inFlight);
      r.sampledAt = Date.now();
      o.onSample?.('ok');
      if (failing.delete(r)) o.logger.info({ replica: r.origin }, 'engine load sampling works again');
    } catch (err) {
      o.onSample?.('failed');
      if (!failing.has(r)) {
        failing.add(r);
        o.logger.warn(
          { replica: r.origin, err: (err as Error).message },
          'cannot read the engine load (/metrics); routing on this API replica’s own count there',
        );
      }
    } finally {
      inFlight.delete(r);
    }
  };

  const forget = (set: ReplicaSet) => {
    for (const r of set.replicas) r.others = 0;
  };

  const tick = async (now = Date.now()): Promise<void> => {
    tickNo++;
    const scrapes: Promise<void>[] = [];
    for (const [id, at] of lastUse) {
      const set = o.replicas(id);
      if (tickNo - at > activeTicks) {
        lastUse.delete(id);
        forget(set);
        continue;
      }
      // One replica: there is nothing to choose between, so its engine's count could not change a
      // pick; it is not scraped (most endpoints, and every call of a single-replica one).
      if (set.replicas.length < 2) {
        forget(set);
        continue;
      }
      for (const r of set.replicas) {
        if (now - r.sampledAt > STALE_INTERVALS * interval) r.others = 0;
        scrapes.push(scrape(r));
      }
    }
    if (!lastUse.size && timer) {
      clearInterval(timer);
      timer = undefined;
    }
    await Promise.all(scrapes);
  };

  return {
    use(id) {
      if (interval <= 0 || closed) return;
      lastUse.set(id, tickNo);
      if (!timer) {
        timer = setInterval(() => void tick(), interval);
        timer.unref();
        // the first sample of a quiet endpoint comes now, not an interval later
        setImmediate(() => void tick());
      }
    },
    tick,
    get active() {
      return lastUse.size;
    },
    async close() {
      closed = true;
      if (timer) clearInterval(timer);
      timer = undefined;
      for (const id of lastUse.keys()) forget(o.replicas(id));
      lastUse.clear();
      await agent.close();
    },
  };
}
