// The upstream of platform-owned dedicated endpoints (the ones our operator runs, on Kubernetes or as
// local processes): the phase gate, wake and hold (./wake.ts) — at most scaling.maxHeldRequests held
// calls per endpoint, a refusal's Retry-After from its measured wake time (./wake-times.ts) — the
// activity the operator scales and hibernates on (./activity.ts), and a lease over the endpoint's
// Ready replicas (./replicas.ts), whose load the engines' own gauges correct (./engine-load.ts) for
// leastLoad and prefixAffinity.
import {
  ANNOTATION_WAKE_FIRST_BYTE,
  ANNOTATION_WAKE_REQUESTED,
  DEFAULT_MAX_HELD_REQUESTS,
  DEFAULT_ROUTING_STRATEGY,
  type DedicatedEndpoint,
} from '@berth/crds';
import type { Logger } from 'pino';
import type { Backends, Endpoints } from '../ports.ts';
import { activityReporter } from './activity.ts';
import { engineLoadSampler, type EngineLoadSampler, type SampleOutcome } from './engine-load.ts';
import { NO_KEY, PICKERS, ReplicaTable, type ReplicaLoad, type ReplicaPicker } from './replicas.ts';
import type { Acquired, HeldThroughWake, Lease, Upstream } from './types.ts';
import { waker } from './wake.ts';
import { wakeTimes, type WakeTimes } from './wake-times.ts';

/** A waking endpoint's Retry-After before any of its wakes was measured (WAKE_RETRY_AFTER_SECONDS). */
const DEFAULT_WAKE_SECONDS = 30;

/** vLLM serves the OpenAI API under /v1. */
const OPENAI_PATH = '/v1';

export interface PlatformUpstream extends Upstream<DedicatedEndpoint> {
  /** Signals a wake of a hibernated endpoint (POST /api/endpoints/{id}/wake), once per hibernation. */
  wake(endpoint: DedicatedEndpoint): Promise<void>;
  /** Calls this API replica has in flight (or held) for the endpoint. */
  inFlight(id: string): number;
  /** Wake annotations this process wrote. */
  readonly wakesSignalled: number;
  /** Calls held now for the endpoint, in this process. */
  holding(id: string): number;
  /** The endpoints' recent wake times (Retry-After). */
  readonly wakeTimes: WakeTimes;
  /** The engine-load sampler (its state, and a round on demand for tests). */
  readonly engineLoad: EngineLoadSampler;
  /** Reports the last activity. */
  close(): Promise<void>;
}

export interface PlatformUpstreamOptions {
  endpoints: Pick<Endpoints, 'get' | 'watch' | 'annotate' | 'signalWake'>;
  backends: Backends;
  logger: Logger;
  /** Once per wake this process signalled, with its duration in seconds (metrics). */
  onWoken?: (id: string, seconds: number) => void;
  /**
   * Once per wake this process held calls through: seconds from the first Ready replica it saw to the
   * first byte of a held call's answer forwarded (metrics).
   */
  onFirstByte?: (id: string, seconds: number) => void;
  /** Retry-After of a waking endpoint none of whose wakes was measured yet (default 30). */
  wakeRetryAfterSeconds?: number;
  /**
   * How often the engines' `/metrics` are sampled for leastLoad and prefixAffinity endpoints with
   * recent calls (ENGINE_LOAD_SAMPLE_MS); 0 or absent: never (loads are this process's own counts).
   */
  engineLoadIntervalMs?: number;
  /** Once per engine scrape (metrics). */
  onEngineSample?: (outcome: SampleOutcome) => void;
}

export function platformUpstream(o: PlatformUpstreamOptions): PlatformUpstream {
  const activity = activityReporter(o.endpoints, o.logger);
  const times = wakeTimes(o.wakeRetryAfterSeconds ?? DEFAULT_WAKE_SECONDS);
  const wakes = waker(o.endpoints, o.backends, o.logger, (id, seconds, signal) => {
    times.observe(id, signal, seconds);
    o.onWoken?.(id, seconds);
  });
  /** Calls held per endpoint now. */
  const holding = new Map<string, number>();
  /** Per endpoint, the end (readyAt) of the last wake whose first byte was recorded. */
  const firstBytes = new Map<string, number>();
  const table = new ReplicaTable((id) => o.backends.addresses(id), OPENAI_PATH);
  const engineLoad = engineLoadSampler({
    intervalMs: o.engineLoadIntervalMs ?? 0,
    replicas: (id) => table.of(id),
    logger: o.logger,
    ...(o.onEngineSample ? { onSample: o.onEngineSample } : {}),
  });

  const lease = (id: string, pick: ReplicaPicker, key: number, end: () => void): Lease => {
    let current: ReplicaLoad | undefined;
    let released = false;
    return {
      next() {
        const set = table.of(id);
        const previous = current;
        if (previous) previous.inFlight--;
        current = set.replicas.length ? pick(set, previous, key) : undefined;
        if (current) current.inFlight++;
        return current?.address;
      },
      release() {
        if (released) return;
        released = true;
        if (current) current.inFlight--;
        current = undefined;
        end();
      },
    };
  };

  /** The first byte of a held call's answer: once per wake, a metric and the receipt's annotation. */
  const firstByte = (id: string) => {
    const readyAt = wakes.readyAt(id);
    if (readyAt === undefined || firstBytes.get(id) === readyAt) return;
    firstBytes.set(id, readyAt);
    const now = Date.now();
    o.onFirstByte?.(id, (now - readyAt) / 1000);
    // Another API replica may have written it for this wake already (the one that forwarded first).
    const a = o.endpoints.get(id)?.metadata.annotations;
    const written = Date.parse(a?.[ANNOTATION_WAKE_FIRST_BYTE] ?? '');
    if (written >= Date.parse(a?.[ANNOTATION_WAKE_REQUESTED] ?? '')) return;
    o.endpoints
      .annotate(id, { [ANNOTATION_WAKE_FIRST_BYTE]: new Date(now).toISOString() })
      .catch((err: unknown) =>
        o.logger.debug(
          { endpoint: id, err: (err as Error).message },
          'could not record the first byte of a wake',
        ),
      );
  };

  /** Holds the call until a replica is Ready: a refusal, or the time it was held (ms). */
  const hold = async (
    endpoint: DedicatedEndpoint,
    holdMs: number,
    signal: AbortSignal,
  ): Promise<Acquired | number> => {
    const id = endpoint.metadata.name;
    const current = o.endpoints.get(id) ?? endpoint;
    const asleep = current.status?.phase === 'hibernated';
    const limit = current.spec.scaling?.maxHeldRequests ?? DEFAULT_MAX_HELD_REQUESTS;
    const held = holding.get(id) ?? 0;
    if (holdMs > 0 && held >= limit) {
      // Refused before anything is awaited (a held stream's headers are not sent yet). The wake is
      // the held calls' (asked here only when none may be held: it is signalled once anyway).
      if (asleep) wakes.wake(current).catch(() => {});
      return { ok: false, reason: 'full', retryAfter: times.retryAfter(current), limit };
    }
    if (holdMs <= 0) {
      if (asleep) await wakes.wake(current);
      return { ok: false, reason: 'waking', retryAfter: times.retryAfter(o.endpoints.get(id) ?? current) };
    }
    // Counted before the wake is written, so a burst holds `limit` calls, not more.
    holding.set(id, held + 1);
    const since = Date.now();
    let outcome;
    try {
      if (asleep) await wakes.wake(current);
      outcome = await wakes.waitReady(id, holdMs, signal);
    } finally {
      const n = (holding.get(id) ?? 1) - 1;
      if (n > 0) holding.set(id, n);
      else holding.delete(id);
    }
    if (outcome === 'ready') return Date.now() - since;
    const latest = o.endpoints.get(id) ?? endpoint;
    if (outcome === 'failed') return { ok: false, reason: 'failed', endpoint: latest };
    if (outcome === 'timeout') return { ok: false, reason: 'timeout', retryAfter: times.retryAfter(latest) };
    return { ok: false, reason: outcome };
  };

  return {
    async acquire(endpoint, { hold: holdMs, signal, key = NO_KEY }): Promise<Acquired> {
      // Terminated (DELETE answered; its engines may still drain): no new calls.
      if (endpoint.metadata.deletionTimestamp) return { ok: false, reason: 'deleted' };
      const phase = endpoint.status?.phase ?? 'building';
      if (phase === 'building') return { ok: false, reason: 'building' };
      if (phase === 'failed') return { ok: false, reason: 'failed', endpoint };
      const id = endpoint.metadata.name;
      // Counted from here: a held call is activity too (the endpoint must not look idle). A call
      // that wakes the endpoint reports it with the wake, in one write (./wake.ts).
      const asleep =
        !o.backends.addresses(id).length && (o.endpoints.get(id) ?? endpoint).status?.phase === 'hibernated';
      const end = activity.begin(id, !asleep);
      let wake: HeldThroughWake | undefined;
      if (!o.backends.addresses(id).length) {
        let held;
        try {
          held = await hold(endpoint, holdMs, signal);
        } catch (err) {
          end();
          throw err;
        }
        if (typeof held !== 'number') {
          end();
          return held;
        }
        wake = { heldMs: held, firstByte: () => firstByte(id) };
      }
      const strategy = endpoint.spec.routing?.strategy ?? DEFAULT_ROUTING_STRATEGY;
      if (strategy !== 'roundRobin') engineLoad.use(id);
      const pick = PICKERS[strategy];
      return { ok: true, lease: lease(id, pick, key, end), ...(wake ? { wake } : {}) };
    },
    wake: (endpoint) => wakes.wake(endpoint),
    inFlight: (id) => activity.inFlight(id),
    get wakesSignalled() {
      return wakes.wakesSignalled;
    },
    holding: (id) => holding.get(id) ?? 0,
    wakeTimes: times,
    engineLoad,
    close: async () => {
      await engineLoad.close();
      await activity.close();
    },
  };
}
