import { createHash } from 'node:crypto';
import type {
  V1Deployment,
  V1EnvVar,
  V1OwnerReference,
  V1PodSpec,
  V1Service,
  V1Volume,
} from '@kubernetes/client-node';
import type { DedicatedEndpoint, InstanceType, ModelSource } from '@berth/crds';
import {
  API_VERSION,
  ENGINE_PORT,
  KIND,
  LABEL_ACCOUNT,
  LABEL_COMPONENT,
  LABEL_ENDPOINT,
  LABEL_MANAGED_BY,
  LABEL_SPEC_HASH,
  MANAGED_BY,
  parseModelSource,
} from '@berth/crds';
import { engineArgs } from '../core/engine-args.ts';

// Pure builders of the endpoint's children. The reconciler server-side-applies their output whole,
// every time something differs; they never read the cluster.

export type ModelCache =
  /** A directory on the GPU node, shared by every endpoint on that node: survives scale-to-zero. */
  | { kind: 'hostPath'; path: string }
  /** A PVC per endpoint, owned by it: survives scale-to-zero, follows the endpoint across nodes (RWX) or pins it (RWO). */
  | { kind: 'pvc'; storageClassName?: string; sizeGiB: number; accessMode: 'ReadWriteOnce' | 'ReadWriteMany' }
  /** No persistence (CPU-only/dev profiles). */
  | { kind: 'emptyDir' };

export interface BuildConfig {
  engineImage: string;
  /** Upper bound for weight download + load before the startup probe gives up. */
  startupTimeoutSeconds: number;
  /** preStop pause so the Service stops routing before the engine gets SIGTERM. */
  drainSeconds: number;
  /** Time for in-flight requests to finish after SIGTERM. */
  terminationGracePeriodSeconds: number;
  modelCache: ModelCache;
  /** Hub base URL for the engine, when not the public hub. */
  hfEndpoint?: string;
  /** Where the engines export their traces (vLLM's --otlp-traces-endpoint), and over which protocol. */
  engineTracing?: { endpoint: string; protocol: 'grpc' | 'http/protobuf' };
}

export const HF_CACHE_DIR = '/root/.cache/huggingface';

/**
 * Where the engine keeps what it rebuilds at every start besides the weights: vLLM's torch.compile
 * and CUDA-graph artifacts (VLLM_CACHE_ROOT), the inductor and Triton kernel caches. On the node's
 * cache volume, next to the weights, so a replica waking on a node a previous one ran on finds
 * them (a cold compile of a 0.5B model's forward: 52 s; with the cache a previous process left:
 * 10 s). Keyed by engine image, model and hardware: two vLLM versions or two models never share
 * an entry, so nothing stale is read.
 */
export function compileCacheEnv(ep: DedicatedEndpoint, image: string): V1EnvVar[] {
  const { model, hardware } = ep.spec;
  const key = specHash(image, model.id, model.revision ?? '', hardware.gpuType, hardware.gpuCount);
  const dir = `${HF_CACHE_DIR}/berth-engine-cache/${key}`;
  return [
    { name: 'VLLM_CACHE_ROOT', value: `${dir}/vllm` },
    { name: 'TORCHINDUCTOR_CACHE_DIR', value: `${dir}/inductor` },
    { name: 'TRITON_CACHE_DIR', value: `${dir}/triton` },
  ];
}
const CACHE_VOLUME = 'model-cache';

export function childLabels(ep: DedicatedEndpoint): Record<string, string> {
  return {
    [LABEL_ENDPOINT]: ep.metadata.name,
    [LABEL_ACCOUNT]: sanitizeLabelValue(ep.spec.account),
    [LABEL_MANAGED_BY]: MANAGED_BY,
  };
}

export function selectorLabels(ep: DedicatedEndpoint): Record<string, string> {
  return { [LABEL_ENDPOINT]: ep.metadata.name };
}

export function ownerReference(ep: DedicatedEndpoint): V1OwnerReference {
  if (!ep.metadata.uid) throw new Error(`endpoint ${ep.metadata.name} has no uid`);
  return {
    apiVersion: API_VERSION,
    kind: KIND,
    name: ep.metadata.name,
    uid: ep.metadata.uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

/** Stable short hash of everything a child is built from (not replicas). */
export function specHash(...parts: unknown[]): string {
  return createHash('sha256').update(stableJson(parts)).digest('hex').slice(0, 16);
}

export function serviceName(ep: DedicatedEndpoint): string {
  return ep.metadata.name;
}

export function serviceUrl(ep: DedicatedEndpoint): string {
  return `http://${serviceName(ep)}.${ep.metadata.namespace}.svc:${ENGINE_PORT}`;
}

export function pvcName(ep: DedicatedEndpoint): string {
  return `${ep.metadata.name}-cache`;
}

export function desiredDeployment(
  ep: DedicatedEndpoint,
  instanceType: InstanceType,
  config: BuildConfig,
  replicas: number,
): V1Deployment {
  const { model, engine } = ep.spec;
  const source = sourceMount(parseModelSource(model.source));
  const env: V1EnvVar[] = [
    { name: 'HF_HOME', value: HF_CACHE_DIR },
    ...compileCacheEnv(ep, engine?.image ?? config.engineImage),
  ];
  if (config.hfEndpoint) env.push({ name: 'HF_ENDPOINT', value: config.hfEndpoint });
  if (config.engineTracing)
    env.push({ name: 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', value: config.engineTracing.protocol });
  if (model.hubTokenSecretRef) {
    env.push({
      name: 'HF_TOKEN',
      valueFrom: { secretKeyRef: { name: model.hubTokenSecretRef.name, key: model.hubTokenSecretRef.key } },
    });
  }
  for (const e of engine?.env ?? []) env.push({ name: e.name, value: e.value });

  const gpus = String(ep.spec.hardware.gpuCount);
  const startupPeriod = 10;
  const deployment: V1Deployment = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: {
      name: ep.metadata.name,
      namespace: ep.metadata.namespace,
      labels: { ...childLabels(ep), [LABEL_COMPONENT]: 'engine' },
      ownerReferences: [ownerReference(ep)],
    },
    spec: {
      replicas,
      selector: { matchLabels: selectorLabels(ep) },
      // Surge one replica before removing one: a rollout never drops serving capacity.
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      template: {
        metadata: {
          labels: { ...childLabels(ep), [LABEL_COMPONENT]: 'engine' },
          ...(engine?.podAnnotations ? { annotations: { ...engine.podAnnotations } } : {}),
        },
        spec: {
          nodeSelector: { ...instanceType.nodeSelector },
          ...warmPlacement(ep.status?.preferredNodes),
          tolerations: [{ key: instanceType.resourceName, operator: 'Exists', effect: 'NoSchedule' }],
          terminationGracePeriodSeconds: config.terminationGracePeriodSeconds,
          enableServiceLinks: false,
          containers: [
            {
              name: 'engine',
              image: engine?.image ?? config.engineImage,
              // The image's entrypoint, not `vllm serve`: the model goes in --model (engine-args.ts).
              args: engineArgs(ep, source.weights, {
                model: 'flag',
                ...(config.engineTracing ? { otlpTracesEndpoint: config.engineTracing.endpoint } : {}),
              }),
              env,
              ...(model.credentialsSecretRef
                ? { envFrom: [{ secretRef: { name: model.credentialsSecretRef.name } }] }
                : {}),
              ports: [{ name: 'http', containerPort: ENGINE_PORT, protocol: 'TCP' }],
              resources: {
                limits: { [instanceType.resourceName]: gpus },
                requests: { [instanceType.resourceName]: gpus },
              },
              startupProbe: {
                httpGet: { path: '/health', port: 'http' },
                periodSeconds: startupPeriod,
                failureThreshold: Math.max(1, Math.ceil(config.startupTimeoutSeconds / startupPeriod)),
              },
              readinessProbe: {
                httpGet: { path: '/health', port: 'http' },
                periodSeconds: 5,
                failureThreshold: 3,
              },
              livenessProbe: {
                httpGet: { path: '/health', port: 'http' },
                periodSeconds: 15,
                failureThreshold: 4,
              },
              lifecycle: { preStop: { sleep: { seconds: config.drainSeconds } } },
              // The last log lines land in the termination message: "logs show the cause" in status.
              terminationMessagePolicy: 'FallbackToLogsOnError',
              volumeMounts: [
                { name: CACHE_VOLUME, mountPath: HF_CACHE_DIR },
                { name: 'shm', mountPath: '/dev/shm' },
                ...(source.volume
                  ? [{ name: source.volume.name, mountPath: MODELS_DIR, readOnly: true }]
                  : []),
              ],
            },
          ],
          volumes: [
            cacheVolume(ep, config.modelCache),
            { name: 'shm', emptyDir: { medium: 'Memory' } },
            ...(source.volume ? [source.volume] : []),
          ],
        },
      },
    },
  };
  deployment.metadata!.labels![LABEL_SPEC_HASH] = specHash(
    deployment.metadata!.name,
    deployment.spec!.template,
    deployment.spec!.strategy,
  );
  return deployment;
}

/**
 * Prefer the nodes the endpoint last ran on (core/placement.ts), the most recent most: preferred,
 * never required, so a replica that does not fit on them is scheduled elsewhere at once.
 */
export function warmPlacement(nodes: readonly string[] | undefined): Pick<V1PodSpec, 'affinity'> {
  if (!nodes?.length) return {};
  return {
    affinity: {
      nodeAffinity: {
        preferredDuringSchedulingIgnoredDuringExecution: nodes.map((name, i) => ({
          weight: Math.max(1, 100 - 25 * i),
          preference: { matchFields: [{ key: 'metadata.name', operator: 'In', values: [name] }] },
        })),
      },
    },
  };
}

/** Where pre-downloaded weights are mounted in the engine container. */
export const MODELS_DIR = '/models';

/**
 * How the engine reaches the weights of a source: a read-only volume at /models (claim, node
 * directory, or an OCI image as an image volume) or, for S3, vLLM's own loader on the URI.
 */
export function sourceMount(source: ModelSource): { weights?: string; volume?: V1Volume } {
  const name = 'model-source';
  switch (source.kind) {
    case 'hub':
      return {};
    case 'pvc':
      return {
        weights: source.path ? `${MODELS_DIR}/${source.path}` : MODELS_DIR,
        volume: { name, persistentVolumeClaim: { claimName: source.claim, readOnly: true } },
      };
    case 'path':
      return { weights: MODELS_DIR, volume: { name, hostPath: { path: source.path, type: 'Directory' } } };
    case 'oci':
      return {
        weights: MODELS_DIR,
        volume: { name, image: { reference: source.reference, pullPolicy: 'IfNotPresent' } },
      };
    case 's3':
      return { weights: source.uri };
  }
}

function cacheVolume(ep: DedicatedEndpoint, cache: ModelCache): V1Volume {
  switch (cache.kind) {
    case 'hostPath':
      return { name: CACHE_VOLUME, hostPath: { path: cache.path, type: 'DirectoryOrCreate' } };
    case 'pvc':
      return { name: CACHE_VOLUME, persistentVolumeClaim: { claimName: pvcName(ep) } };
    case 'emptyDir':
      return { name: CACHE_VOLUME, emptyDir: {} };
  }
}

export function desiredService(ep: DedicatedEndpoint): V1Service {
  const service: V1Service = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: {
      name: serviceName(ep),
      namespace: ep.metadata.namespace,
      labels: { ...childLabels(ep), [LABEL_COMPONENT]: 'engine' },
      ownerReferences: [ownerReference(ep)],
    },
    spec: {
      type: 'ClusterIP',
      selector: selectorLabels(ep),
      ports: [{ name: 'http', port: ENGINE_PORT, targetPort: 'http', protocol: 'TCP' }],
    },
  };
  service.metadata!.labels![LABEL_SPEC_HASH] = specHash(service.spec);
  return service;
}

/** The Gateway API Inference Extension's pool kind (v1, as served since the extension's v1.0). */
export const INFERENCE_POOL_API_VERSION = 'inference.networking.k8s.io/v1';

export interface InferencePool {
  apiVersion: string;
  kind: 'InferencePool';
  metadata: V1Service['metadata'];
  spec: {
    selector: { matchLabels: Record<string, string> };
    targetPorts: { number: number }[];
    endpointPickerRef: {
      kind: 'Service';
      name: string;
      port: { number: number };
      failureMode: 'FailOpen' | 'FailClose';
    };
  };
}

/**
 * The endpoint's InferencePool: its engine pods (the Service's selector) on the engine port, and
 * the endpoint picker the spec names, else the operator's default (`{name}` → the endpoint id).
 */
export function desiredInferencePool(
  ep: DedicatedEndpoint,
  defaultPicker: { service: string; port: number },
): InferencePool {
  const picker = ep.spec.inferencePool?.endpointPicker;
  const pool: InferencePool = {
    apiVersion: INFERENCE_POOL_API_VERSION,
    kind: 'InferencePool',
    metadata: {
      name: ep.metadata.name,
      namespace: ep.metadata.namespace,
      labels: { ...childLabels(ep), [LABEL_COMPONENT]: 'inference-pool' },
      ownerReferences: [ownerReference(ep)],
    },
    spec: {
      selector: { matchLabels: selectorLabels(ep) },
      targetPorts: [{ number: ENGINE_PORT }],
      endpointPickerRef: {
        kind: 'Service',
        name: picker?.name ?? defaultPicker.service.replaceAll('{name}', ep.metadata.name),
        port: { number: picker?.port ?? defaultPicker.port },
        failureMode: picker?.failureMode ?? 'FailClose',
      },
    },
  };
  pool.metadata!.labels![LABEL_SPEC_HASH] = specHash(pool.spec);
  return pool;
}

/** The per-endpoint weight cache claim (modelCache.kind === 'pvc'). Owned, so deleted with the endpoint. */
export function desiredCacheClaim(ep: DedicatedEndpoint, cache: Extract<ModelCache, { kind: 'pvc' }>) {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: {
      name: pvcName(ep),
      namespace: ep.metadata.namespace,
      labels: { ...childLabels(ep), [LABEL_COMPONENT]: 'model-cache' },
      ownerReferences: [ownerReference(ep)],
    },
    spec: {
      accessModes: [cache.accessMode],
      ...(cache.storageClassName ? { storageClassName: cache.storageClassName } : {}),
      resources: { requests: { storage: `${cache.sizeGiB}Gi` } },
    },
  };
}

function sanitizeLabelValue(v: string): string {
  const s = v.replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 63);
  return s.replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '');
}

function stableJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(stableJson).join(',')}]`;
  if (v && typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>).filter(([, x]) => x !== undefined);
    entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${stableJson(x)}`).join(',')}}`;
  }
  return JSON.stringify(v);
}
