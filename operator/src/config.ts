import { hostname } from 'node:os';
import type { Catalog } from '@berth/crds';
import { loadCatalog } from '@berth/crds';
import { z } from 'zod';
import type { ModelCache } from './k8s/builders.ts';

export const DEFAULT_ENGINE_IMAGE = 'vllm/vllm-openai:v0.11.0';

const seconds = (name: string, def: number, min = 1) =>
  z.coerce
    .number({ error: `${name} must be a number of seconds` })
    .int(`${name} must be a whole number of seconds`)
    .min(min, `${name} must be at least ${min}`)
    .default(def);

const modelCache = z
  .string()
  .default('hostPath:/var/lib/berth/hf-cache')
  .transform((v, ctx): ModelCache => {
    const [kind, a, b] = v.split(':');
    if (kind === 'hostPath' && a?.startsWith('/')) return { kind: 'hostPath', path: a };
    if (kind === 'emptyDir') return { kind: 'emptyDir' };
    const size = /^(\d+)Gi$/.exec(a ?? '');
    if ((kind === 'pvc' || kind === 'pvc-rwx') && size) {
      return {
        kind: 'pvc',
        sizeGiB: Number(size[1]),
        accessMode: kind === 'pvc' ? 'ReadWriteOnce' : 'ReadWriteMany',
        ...(b ? { storageClassName: b } : {}),
      };
    }
    ctx.addIssue({
      code: 'custom',
      message:
        'BERTH_MODEL_CACHE must be hostPath:/abs/path, pvc:<N>Gi[:storageClass], pvc-rwx:<N>Gi[:storageClass] or emptyDir',
    });
    return z.NEVER;
  });

/** Operator configuration: one schema, parsed from the environment at boot. */
export const EnvSchema = z.object({
  KUBECONFIG: z.string().optional().describe('Path to a kubeconfig; unset = in-cluster service account'),
  BERTH_NAMESPACE: z
    .string()
    .regex(
      /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$/,
      'BERTH_NAMESPACE must be a namespace name, or empty to watch all namespaces',
    )
    .default('')
    .describe('Namespace to watch; empty = all'),
  BERTH_CATALOG_FILE: z
    .string()
    .optional()
    .describe('JSON/YAML instance-type catalog; unset = built-in default'),
  HF_ENDPOINT: z
    .url('HF_ENDPOINT must be a URL such as https://huggingface.co')
    .default('https://huggingface.co'),
  BERTH_ENGINE_IMAGE: z
    .string()
    .min(1, 'BERTH_ENGINE_IMAGE must name an image')
    .default(DEFAULT_ENGINE_IMAGE),
  BERTH_PROVISIONING_TIMEOUT_SECONDS: seconds('BERTH_PROVISIONING_TIMEOUT_SECONDS', 1800),
  BERTH_WAKE_TIMEOUT_SECONDS: seconds('BERTH_WAKE_TIMEOUT_SECONDS', 600),
  BERTH_STARTUP_TIMEOUT_SECONDS: seconds('BERTH_STARTUP_TIMEOUT_SECONDS', 1800),
  BERTH_DRAIN_SECONDS: seconds('BERTH_DRAIN_SECONDS', 15, 0),
  BERTH_TERMINATION_GRACE_SECONDS: seconds('BERTH_TERMINATION_GRACE_SECONDS', 300),
  BERTH_MODEL_CACHE: modelCache,
  BERTH_CRASHLOOP_RESTARTS: z.coerce.number().int().min(1).default(3),
  BERTH_GPU_MEMORY_UTILIZATION: z.coerce
    .number()
    .gt(0)
    .max(1, 'BERTH_GPU_MEMORY_UTILIZATION is a fraction, e.g. 0.9')
    .default(0.9),
  BERTH_TARGET_INFLIGHT_PER_REPLICA: z.coerce.number().int().min(1).default(16),
  BERTH_METRICS_PORT: z.coerce
    .number()
    .int()
    .min(0, 'BERTH_METRICS_PORT must be 0-65535')
    .max(65535)
    .default(8080),
  BERTH_LEADER_ELECTION: z
    .enum(['true', 'false'], { error: 'BERTH_LEADER_ELECTION must be true or false' })
    .default('true'),
  BERTH_LEASE_NAMESPACE: z
    .string()
    .optional()
    .describe('Namespace of the leader Lease; default BERTH_NAMESPACE or berth-system'),
  BERTH_LEASE_NAME: z.string().default('berth-operator'),
  BERTH_IDENTITY: z.string().optional().describe('Leader-election identity; default hostname_pid'),
  BERTH_RESYNC_SECONDS: seconds('BERTH_RESYNC_SECONDS', 300),
  BERTH_CONCURRENCY: z.coerce.number().int().min(1).max(64).default(4),
  LOG_LEVEL: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'),
});

export interface OperatorConfig {
  kubeconfig?: string;
  namespace: string;
  catalog: Catalog;
  hfEndpoint: string;
  engineImage: string;
  provisioningTimeoutSeconds: number;
  wakeTimeoutSeconds: number;
  startupTimeoutSeconds: number;
  drainSeconds: number;
  terminationGracePeriodSeconds: number;
  modelCache: ModelCache;
  crashLoopRestarts: number;
  gpuMemoryUtilization: number;
  targetInFlightPerReplica: number;
  metricsPort: number;
  leaderElection: boolean;
  leaseNamespace: string;
  leaseName: string;
  identity: string;
  resyncSeconds: number;
  concurrency: number;
  logLevel: string;
  /** Lease timings (client-go defaults 15/10/2 s); tests shorten them. */
  lease?: { durationSeconds: number; renewDeadlineSeconds: number; retryPeriodSeconds: number };
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export function configFromEnv(env: NodeJS.ProcessEnv = process.env): OperatorConfig {
  const r = EnvSchema.safeParse(Object.fromEntries(Object.entries(env).filter(([, v]) => v !== '' || false)));
  if (!r.success) {
    const lines = r.error.issues.map((i) => `  ${i.path.join('.') || '(env)'}: ${i.message}`);
    throw new ConfigError(
      `invalid operator configuration; fix these environment variables:\n${lines.join('\n')}`,
    );
  }
  const e = r.data;
  return {
    kubeconfig: e.KUBECONFIG,
    namespace: e.BERTH_NAMESPACE,
    catalog: loadCatalog(e.BERTH_CATALOG_FILE),
    hfEndpoint: e.HF_ENDPOINT,
    engineImage: e.BERTH_ENGINE_IMAGE,
    provisioningTimeoutSeconds: e.BERTH_PROVISIONING_TIMEOUT_SECONDS,
    wakeTimeoutSeconds: e.BERTH_WAKE_TIMEOUT_SECONDS,
    startupTimeoutSeconds: e.BERTH_STARTUP_TIMEOUT_SECONDS,
    drainSeconds: e.BERTH_DRAIN_SECONDS,
    terminationGracePeriodSeconds: e.BERTH_TERMINATION_GRACE_SECONDS,
    modelCache: e.BERTH_MODEL_CACHE,
    crashLoopRestarts: e.BERTH_CRASHLOOP_RESTARTS,
    gpuMemoryUtilization: e.BERTH_GPU_MEMORY_UTILIZATION,
    targetInFlightPerReplica: e.BERTH_TARGET_INFLIGHT_PER_REPLICA,
    metricsPort: e.BERTH_METRICS_PORT,
    leaderElection: e.BERTH_LEADER_ELECTION === 'true',
    leaseNamespace: e.BERTH_LEASE_NAMESPACE ?? (e.BERTH_NAMESPACE || 'berth-system'),
    leaseName: e.BERTH_LEASE_NAME,
    identity: e.BERTH_IDENTITY ?? `${hostname()}_${process.pid}`,
    resyncSeconds: e.BERTH_RESYNC_SECONDS,
    concurrency: e.BERTH_CONCURRENCY,
    logLevel: e.LOG_LEVEL,
  };
}
