// The upstream of platform-owned dedicated endpoints (the ones our operator runs, on Kubernetes or as
// local processes): the phase gate, wake and hold (./wake.ts), the activity the operator scales and
// hibernates on (./activity.ts), and a lease over the endpoint's Ready replicas (./replicas.ts), whose
// load the engines' own gauges correct (./engine-load.ts) for leastLoad and prefixAffinity.
import { DEFAULT_ROUTING_STRATEGY, type DedicatedEndpoint } from '@berth/crds';
import type { Logger } from 'pino';
import type { Backends, Endpoints } from '../endpoints/ports.ts';
import { activityReporter } from './activity.ts';
import { engineLoadSampler, type EngineLoadSampler, type SampleOutcome } from './engine-load.ts';
import { NO_KEY, PICKERS, ReplicaTable, type ReplicaLoad, type ReplicaPicker } from './replicas.ts';
import type { Acquired, Lease, Upstream } from './types.ts';
import { waker } from './wake.ts';

/** vLLM serves the OpenAI API under /v1. */
const OPENAI_PATH = '/v1';

export interface PlatformUpstream extends Upstream<DedicatedEndpoint> {
  /** Signals a wake of a hibernated endpoint (POST /api/endpoints/{id}/wake), once per hibernation. */
  wake(endpoint: DedicatedEndpoint): Promise<void>;
  /** Calls this API replica has in flight (or held) for the endpoint. */
  inFlight(id: string): number;
  /** Wake annotations this process wrote. */
  readonly wakesSignalled: number;
  /** The engine-load sampler (its state, and a round on demand for tests). */
  readonly engineLoad: EngineLoadSampler;
  /** Reports the last activity. */
  close(): Promise<void>;
}

export interface PlatformUpstreamOptions {
  endpoints: Pick<Endpoints, 'get' | 'watch' | 'annotate'>;
  backends: Backends;
  logger: Logger;
  /** Once per wake this process signalled, with its duration in seconds (metrics). */
  onWoken?: (id: string, seconds: number) => void;
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
  const wakes = waker(o.endpoints, o.backends, o.logger, o.onWoken);
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

  return {
    async acquire(endpoint, { hold, signal, key = NO_KEY }): Promise<Acquired> {
      // Terminated (DELETE answered; its engines may still drain): no new calls.
      if (endpoint.metadata.deletionTimestamp) return { ok: false, reason: 'deleted' };
      const phase = endpoint.status?.phase ?? 'building';
      if (phase === 'building') return { ok: false, reason: 'building' };
      if (phase === 'failed') return { ok: false, reason: 'failed', endpoint };
      const id = endpoint.metadata.name;
      // Counted from here: a held call is activity too (the endpoint must not look idle).
      const end = activity.begin(id);
      try {
        if (!o.backends.addresses(id).length) {
          const current = o.endpoints.get(id) ?? endpoint;
          if (current.status?.phase === 'hibernated') await wakes.wake(current);
          if (hold <= 0) {
            end();
            return { ok: false, reason: 'waking' };
          }
          const outcome = await wakes.waitReady(id, hold, signal);
          if (outcome !== 'ready') {
            end();
            if (outcome === 'failed')
              return { ok: false, reason: 'failed', endpoint: o.endpoints.get(id) ?? endpoint };
            return { ok: false, reason: outcome };
          }
        }
      } catch (err) {
        end();
        throw err;
      }
      const strategy = endpoint.spec.routing?.strategy ?? DEFAULT_ROUTING_STRATEGY;
      if (strategy !== 'roundRobin') engineLoad.use(id);
      const pick = PICKERS[strategy];
      return { ok: true, lease: lease(id, pick, key, end) };
    },
    wake: (endpoint) => wakes.wake(endpoint),
    inFlight: (id) => activity.inFlight(id),
    get wakesSignalled() {
      return wakes.wakesSignalled;
    },
    engineLoad,
    close: async () => {
      await engineLoad.close();
      await activity.close();
    },
  };
}
