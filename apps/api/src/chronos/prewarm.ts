// Pre-warm: a run whose chat steps are served by a platform endpoint that is hibernated wakes it
// CHRONOS_PREWARM_SECONDS before the fire, so the first step does not wait for a cold start.
//
// One `chronos-prewarm` pg-boss job per (run, occurrence), queued with the fire in the same
// transaction and delayed to `fire − lead`: pg-boss hands it to one replica, so the wake is requested
// once per fire whatever the number of API replicas. The wake goes through the proxy's own
// wake-on-demand path (PlatformUpstream.wake: the wake annotation, skipped when the endpoint already
// carries a wake newer than its hibernation). Nothing is reserved or charged: the endpoints are the
// platform's, and the run pays for its steps when they run.
//
// A step on `auto` wakes the endpoint of the model Olympus will choose for it at the fire, asked of
// the live path's own chooseModel() (./execute.ts chooseStepModel) with every pool counted as warm —
// as they will be once this pre-warm has woken them: a matching policy route's model, else the
// objective's first choice. At the fire that model is up, so the step's own choice (made then, with
// the models' real state) is the same one. Counting only the pools warm now would instead never wake
// the objective's first choice while any other allowed model is warm, and the step would run on a
// worse one. The route match costs one embedding call, not charged; a prompt that uses an earlier
// step's output is matched with those outputs empty.
import type { DedicatedEndpoint } from '@berth/crds';
import type { EndpointCache, EndpointWrites } from '../dedicated/ports.ts';
import { isOlympusModel } from '../olympus/choose.ts';
import type { ElasticCatalog } from '../elastic/catalog.ts';
import type { CatalogModel } from '../elastic/entry.ts';
import { ApiError } from '../platform/errors.ts';
import { chooseStepModel, type StepDeps } from './execute.ts';
import { renderStep, type Step } from './steps.ts';

export interface PrewarmPlatform {
  /** `annotate`: the activity that keeps an endpoint awake until the fire. */
  endpoints: Pick<EndpointCache, 'get'> & Pick<EndpointWrites, 'annotate'>;
  /** The proxy's wake-on-demand (PlatformUpstream.wake). */
  upstream: { wake(endpoint: DedicatedEndpoint): Promise<void> };
}

export interface PrewarmTarget {
  endpoint: DedicatedEndpoint;
  /** The catalog model of the step that calls it. */
  model: string;
  step: number;
  /** Hibernated (to wake); otherwise up or waking (to keep awake until the fire). */
  asleep: boolean;
}

type ChooseDeps = Pick<StepDeps, 'catalog' | 'olympus' | 'tools' | 'routes'> & {
  caller: Pick<StepDeps['caller'], 'state' | 'now'>;
};

/**
 * Whether a run with these steps may call a platform endpoint (decided when its fire is queued):
 * a chat step on `auto`, or on a catalog model with an endpoint backend.
 */
export function mayCallEndpoint(catalog: Pick<ElasticCatalog, 'get'>, steps: readonly Step[]): boolean {
  return steps.some(
    (s) =>
      s.type === 'chat' &&
      (isOlympusModel(s.model) || (catalog.get(s.model)?.backends.some((b) => 'endpoint' in b) ?? false)),
  );
}

/**
 * The hibernated endpoints the run's chat steps would call: per step, the backend its model's call
 * would use first (backends in order; an external URL or an endpoint that is up or waking answers
 * without a wake; one that is building, failed or terminating is skipped by the call too). With
 * `awake`, also the endpoints the steps would call that are up or waking.
 */
export async function prewarmTargets(
  deps: ChooseDeps & { platform: { endpoints: Pick<EndpointCache, 'get'> } },
  accountId: string,
  steps: readonly Step[],
  call: { requestId: string; signal: AbortSignal },
  options: { awake?: boolean } = {},
): Promise<PrewarmTarget[]> {
  const targets = new Map<string, PrewarmTarget>();
  // Olympus's view at the fire: the pools this pre-warm wakes are warm by then (cool-downs and
  // latency as they are now).
  const atFire = {
    ...deps,
    caller: {
      state: (m: CatalogModel) => ({ ...deps.caller.state(m), warm: true }),
      now: () => deps.caller.now(),
    },
  };
  for (const [index, raw] of steps.entries()) {
    if (raw.type !== 'chat') continue;
    const step = renderStep(raw, []);
    if (step.type !== 'chat') continue;
    let model: CatalogModel;
    try {
      ({ model } = await chooseStepModel(atFire, accountId, step, call));
    } catch (err) {
      // No model for the step (the step will fail with the reason when it runs): nothing to wake.
      if (err instanceof ApiError) continue;
      throw err;
    }
    for (const b of model.backends) {
      if (!('endpoint' in b)) break;
      const e = deps.platform.endpoints.get(b.endpoint);
      const phase = e?.status?.phase;
      if (!e || e.metadata.deletionTimestamp || phase === 'building' || phase === 'failed') continue;
      const asleep = phase === 'hibernated';
      if ((asleep || options.awake) && !targets.has(b.endpoint))
        targets.set(b.endpoint, { endpoint: e, model: model.name, step: index, asleep });
      break;
    }
  }
  return [...targets.values()];
}
