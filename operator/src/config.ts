import { hostname } from 'node:os';
import type { Catalog } from '@berth/crds';
import { loadCatalog } from '@berth/crds';
import { z } from 'zod';
import { reconcilerConfig, reconcilerEnv, seconds, type ReconcilerConfig } from './core/config.ts';
import type { ModelCache } from './k8s/builders.ts';

export const DEFAULT_ENGINE_IMAGE = 'vllm/vllm-openai:v0.11.0';
/** On Kubernetes the pre-start checks always run: against the public hub unless HF_ENDPOINT says. */
export const DEFAULT_HF_ENDPOINT = 'https://huggingface.co';

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

/** Operator configuration: one schema (the reconciler's fragment included), parsed from the environment at boot. */
/** `<service>:<port>`; `{name}` in the service stands for the endpoint id. */
const PICKER = /^(\{name\}|[a-z0-9])([-a-z0-9.]|\{name\})*:\d{1,5}$/;

export const EnvSchema = z.object({
  ...reconcilerEnv.shape,
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
  BERTH_ENGINE_IMAGE: z
    .string()
    .min(1, 'BERTH_ENGINE_IMAGE must name an image')
    .default(DEFAULT_ENGINE_IMAGE),
  BERTH_STARTUP_TIMEOUT_SECONDS: seconds(1800),
  BERTH_DRAIN_SECONDS: seconds(15, 0),
  BERTH_TERMINATION_GRACE_SECONDS: seconds(300),
  BERTH_MODEL_CACHE: modelCache,
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
  BERTH_WAKE_TOKEN: z
    .string()
    .min(16, 'BERTH_WAKE_TOKEN must be at least 16 characters (the chart generates one)')
    .optional()
    .describe(
      "Bearer token of POST /wake on the metrics port, where the API tells the leader of a wake before the annotation's watch event does (the API's BERTH_WAKE_TOKEN); unset: no such route",
    ),
  LOG_LEVEL: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'),
  BERTH_ENGINE_OTLP_TRACES_ENDPOINT: z
    .url('BERTH_ENGINE_OTLP_TRACES_ENDPOINT must be a URL such as http://otel-collector:4317')
    .optional()
    .describe(
      "Where the engines export their traces (vLLM's --otlp-traces-endpoint); unset: no engine tracing",
    ),
  BERTH_ENGINE_OTLP_TRACES_PROTOCOL: z
    .enum(['grpc', 'http/protobuf'], {
      error: 'BERTH_ENGINE_OTLP_TRACES_PROTOCOL must be grpc or http/protobuf',
    })
    .default('grpc')
    .describe('The OTLP protocol of that endpoint (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL of the engines)'),
  BERTH_INFERENCE_POOLS: z
    .enum(['true', 'false'], { error: 'BERTH_INFERENCE_POOLS must be true or false' })
    .default('false')
    .describe(
      'Reconcile an InferencePool for endpoints whose spec.inferencePool.enabled is unset (needs the InferencePool CRD; without it nothing happens)',
    ),
  BERTH_INFERENCE_POOL_PICKER: z
    .string()
    .regex(
      PICKER,
      'BERTH_INFERENCE_POOL_PICKER must be <service>:<port>, where {name} in the service stands for the endpoint id (e.g. {name}-epp:9002)',
    )
    .default('{name}-epp:9002')
    .describe('The endpoint picker of an endpoint’s pool unless its spec names one'),
});

export interface PoolDefaults {
  enabled: boolean;
  picker: { service: string; port: number };
}

export function poolDefaults(enabled: boolean, picker: string): PoolDefaults {
  const at = picker.lastIndexOf(':');
  return { enabled, picker: { service: picker.slice(0, at), port: Number(picker.slice(at + 1)) } };
}

export interface OperatorConfig extends ReconcilerConfig {
  kubeconfig?: string;
  namespace: string;
  catalog: Catalog;
  hfEndpoint: string;
  engineImage: string;
  startupTimeoutSeconds: number;
  drainSeconds: number;
  terminationGracePeriodSeconds: number;
  modelCache: ModelCache;
  metricsPort: number;
  leaderElection: boolean;
  leaseNamespace: string;
  leaseName: string;
  identity: string;
  logLevel: string;
  /** The token of POST /wake (unset: the route is off). */
  wakeToken?: string;
  /** Lease timings (client-go defaults 15/10/2 s); tests shorten them. */
  lease?: { durationSeconds: number; renewDeadlineSeconds: number; retryPeriodSeconds: number };
  /** InferencePools: the default for endpoints that do not say, and the default endpoint picker. */
  inferencePools?: PoolDefaults;
  /** Where the engines export traces (unset: not at all). */
  engineTracing?: { endpoint: string; protocol: 'grpc' | 'http/protobuf' };
  /** While the InferencePool CRD is absent, how often to ask whether it was installed (60 s; tests shorten it). */
  poolRecheckMs?: number;
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
    ...reconcilerConfig(e),
    kubeconfig: e.KUBECONFIG,
    namespace: e.BERTH_NAMESPACE,
    catalog: loadCatalog(e.BERTH_CATALOG_FILE),
    hfEndpoint: e.HF_ENDPOINT ?? DEFAULT_HF_ENDPOINT,
    engineImage: e.BERTH_ENGINE_IMAGE,
    startupTimeoutSeconds: e.BERTH_STARTUP_TIMEOUT_SECONDS,
    drainSeconds: e.BERTH_DRAIN_SECONDS,
    terminationGracePeriodSeconds: e.BERTH_TERMINATION_GRACE_SECONDS,
    modelCache: e.BERTH_MODEL_CACHE,
    metricsPort: e.BERTH_METRICS_PORT,
    leaderElection: e.BERTH_LEADER_ELECTION === 'true',
    leaseNamespace: e.BERTH_LEASE_NAMESPACE ?? (e.BERTH_NAMESPACE || 'berth-system'),
    leaseName: e.BERTH_LEASE_NAME,
    identity: e.BERTH_IDENTITY ?? `${hostname()}_${process.pid}`,
    logLevel: e.LOG_LEVEL,
    ...(e.BERTH_WAKE_TOKEN ? { wakeToken: e.BERTH_WAKE_TOKEN } : {}),
    inferencePools: poolDefaults(e.BERTH_INFERENCE_POOLS === 'true', e.BERTH_INFERENCE_POOL_PICKER),
    ...(e.BERTH_ENGINE_OTLP_TRACES_ENDPOINT
      ? {
          engineTracing: {
            endpoint: e.BERTH_ENGINE_OTLP_TRACES_ENDPOINT,
            protocol: e.BERTH_ENGINE_OTLP_TRACES_PROTOCOL,
          },
        }
      : {}),
  };
}
