import { z } from 'zod';

// The reconciler's configuration, one schema fragment for every runtime: the operator's
// environment schema and the API's (local mode runs the same reconciler) both include it, so the
// same variable means and validates the same everywhere. Messages do not repeat the variable's name:
// both configuration errors print it in front.

/** A whole number of seconds from the environment (operator variables use it too). */
export const seconds = (def: number, min = 1) =>
  z.coerce
    .number({ error: 'must be a number of seconds' })
    .int('must be a whole number of seconds')
    .min(min, `must be at least ${min}`)
    .default(def);

const count = (def: number, max?: number) => {
  const n = z.coerce
    .number({ error: 'must be a number' })
    .int('must be a whole number')
    .min(1, 'must be at least 1');
  return (max ? n.max(max, `must be at most ${max}`) : n).default(def);
};

export const reconcilerEnv = z.object({
  HF_ENDPOINT: z
    .url('must be a URL such as https://huggingface.co')
    .optional()
    .describe('Model hub for the pre-start checks (size, gated model, token)'),
  BERTH_PREFLIGHT: z
    .enum(['true', 'false'], { error: 'must be true or false' })
    .default('true')
    .describe(
      'Ask the model hub before provisioning (hub sources only); false starts the engine without asking',
    ),
  BERTH_HUB_UNREACHABLE_SECONDS: seconds(60).describe(
    'A hub that does not answer the pre-start checks this long fails the endpoint with ModelSourceUnreachable',
  ),
  BERTH_PROVISIONING_TIMEOUT_SECONDS: seconds(1800).describe(
    '`building` longer than this fails with ProvisioningTimeout',
  ),
  BERTH_WAKE_TIMEOUT_SECONDS: seconds(600).describe('`waking` longer than this fails with WakeTimeout'),
  BERTH_CRASHLOOP_RESTARTS: count(3).describe(
    'Restarts of a crashing engine before the endpoint fails with CrashLoop',
  ),
  BERTH_GPU_MEMORY_UTILIZATION: z.coerce
    .number({ error: 'must be a number' })
    .gt(0, 'must be greater than 0')
    .max(1, 'is a fraction, e.g. 0.9')
    .default(0.9)
    .describe("Fraction of GPU memory vLLM may use (the model-size check's budget)"),
  BERTH_TARGET_INFLIGHT_PER_REPLICA: count(16).describe(
    'Requests in flight one replica carries before another is added (up to maxReplicas)',
  ),
  BERTH_RESYNC_SECONDS: seconds(300).describe('Every endpoint is reconciled at least this often'),
  BERTH_CONCURRENCY: count(32, 64).describe('Endpoints reconciled at the same time'),
});

export type ReconcilerEnv = z.infer<typeof reconcilerEnv>;

/** The reconciler's settings, as the runtimes pass them to the controller. */
export interface ReconcilerConfig {
  /** Model hub for the pre-start checks; absent: the checks are skipped. */
  hfEndpoint?: string;
  /** Run the hub checks at all (false: hub sources start without them). Default true. */
  preflight?: boolean;
  /** How long the hub may not answer the checks before the endpoint fails. Default 60. */
  hubUnreachableSeconds?: number;
  provisioningTimeoutSeconds: number;
  wakeTimeoutSeconds: number;
  crashLoopRestarts: number;
  gpuMemoryUtilization: number;
  targetInFlightPerReplica: number;
  resyncSeconds: number;
  concurrency: number;
}

export function reconcilerConfig(env: ReconcilerEnv): ReconcilerConfig {
  return {
    ...(env.HF_ENDPOINT ? { hfEndpoint: env.HF_ENDPOINT } : {}),
    preflight: env.BERTH_PREFLIGHT === 'true',
    hubUnreachableSeconds: env.BERTH_HUB_UNREACHABLE_SECONDS,
    provisioningTimeoutSeconds: env.BERTH_PROVISIONING_TIMEOUT_SECONDS,
    wakeTimeoutSeconds: env.BERTH_WAKE_TIMEOUT_SECONDS,
    crashLoopRestarts: env.BERTH_CRASHLOOP_RESTARTS,
    gpuMemoryUtilization: env.BERTH_GPU_MEMORY_UTILIZATION,
    targetInFlightPerReplica: env.BERTH_TARGET_INFLIGHT_PER_REPLICA,
    resyncSeconds: env.BERTH_RESYNC_SECONDS,
    concurrency: env.BERTH_CONCURRENCY,
  };
}
