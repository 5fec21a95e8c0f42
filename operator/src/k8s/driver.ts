import type { DedicatedEndpoint, InstanceType, ModelSource } from '@berth/crds';
import { FIELD_MANAGER, LABEL_SPEC_HASH } from '@berth/crds';
import type {
  KubeConfig,
  KubernetesObject,
  V1Deployment,
  V1Secret,
  V1Service,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { CoreV1Api } from '@kubernetes/client-node';
import type { HubToken } from '../core/preflight.ts';
import type { WorkloadDriver } from '../core/runtime.ts';
import type { ObservedWorkload, PreflightResult } from '../core/types.ts';
import { errorText } from '../core/error-text.ts';
import type { BuildConfig } from './builders.ts';
import {
  desiredCacheClaim,
  desiredDeployment,
  desiredInferencePool,
  desiredService,
  INFERENCE_POOL_API_VERSION,
  serviceUrl,
} from './builders.ts';
import type { PoolDefaults } from '../config.ts';
import { keyOf, type KubeCache } from './cache.ts';
import { driftOf, scaleOnly } from './drift.ts';
import { observeWorkload } from './observe.ts';
import { KubeApiError, KubeRequests, MERGE_PATCH, resourcePath } from './requests.ts';

// The endpoint's workload on Kubernetes: a Deployment, a Service and optionally a model-cache PVC,
// server-side applied from the pure builders when the cache shows they differ (drift.ts); observed
// from the Deployment and its pods.

/** What the operator writes, as the writes metric labels it. */
export type WrittenResource =
  'deployment' | 'service' | 'persistentvolumeclaim' | 'inferencepool' | 'status' | 'finalizer' | 'event';

/** A KubeWorkloadDriver's options. */
interface KubeWorkloadDriverOptions {
  build: BuildConfig;
  crashLoopRestarts: number;
  log?: Logger;
  /** The object-storage reachability check's client (tests pass their own). */
  fetch?: typeof fetch;
  /** Every write to the API server (a metric: a quiet resync writes nothing). */
  onWrite?: (resource: WrittenResource) => void;
  /** InferencePools: the default for endpoints that do not say, and the default picker. */
  pools?: PoolDefaults;
}

export class KubeWorkloadDriver implements WorkloadDriver {
  private readonly cache: KubeCache;
  private readonly o: KubeWorkloadDriverOptions;
  private readonly requests: KubeRequests;
  private readonly core: CoreV1Api;
  /** Endpoint key → `uid/size` of the model-cache claim applied for it. */
  private readonly claimsApplied = new Map<string, string>();

  constructor(cache: KubeCache, kc: KubeConfig, o: KubeWorkloadDriverOptions) {
    this.cache = cache;
    this.o = o;
    this.requests = new KubeRequests(kc);
    this.core = kc.makeApiClient(CoreV1Api);
  }

  async observe(ep: DedicatedEndpoint): Promise<ObservedWorkload> {
    return observeWorkload(this.cache.deployment(ep), this.cache.podsOf(ep), {
      crashLoopRestarts: this.o.crashLoopRestarts,
    });
  }

  async apply(
    ep: DedicatedEndpoint,
    instanceType: InstanceType | undefined,
    replicas: number,
  ): Promise<void> {
    const { name, namespace } = ep.metadata;
    const cached = this.cache.deployment(ep);
    if (!instanceType) {
      // Nothing valid to run: remove the engine (the Service and cache stay until the endpoint goes).
      if (cached) {
        await this.requests.send('DELETE', resourcePath('apps/v1', 'Deployment', namespace!, name));
        this.o.onWrite?.('deployment');
      }
      return;
    }
    const build = this.o.build;
    if (build.modelCache.kind === 'pvc') {
      // No informer for claims: applied once per endpoint and process (a claim in use is protected
      // from deletion by Kubernetes itself; its spec is immutable but for its size).
      const claim = desiredCacheClaim(ep, build.modelCache);
      const applied = `${ep.metadata.uid}/${claim.spec.resources.requests.storage}`;
      if (this.claimsApplied.get(keyOf(namespace, name)) !== applied) {
        await this.ssa(claim, 'persistentvolumeclaim');
        this.claimsApplied.set(keyOf(namespace, name), applied);
      }
    }
    // Re-applied whenever the live object departs from the desired one in a field we own (deleted,
    // scaled or edited by hand, or a new spec): the watches bring such a change here at once.
    // Independent objects: applied at once (a pass waits for one round trip, not two).
    await Promise.all([
      this.applyIfDrifted(ep, desiredService(ep), this.cache.service(ep), 'service'),
      this.applyIfDrifted(ep, desiredDeployment(ep, instanceType, build, replicas), cached, 'deployment'),
      this.applyPool(ep),
    ]);
  }

  /**
   * The endpoint's InferencePool, where the kind is served: applied (and restored on drift) while
   * the endpoint asks for one (its spec, else the operator's default), deleted once it no longer
   * does. Its owner reference removes it with the endpoint.
   */
  private async applyPool(ep: DedicatedEndpoint): Promise<void> {
    const pools = this.cache.pools;
    if (!pools.served) return;
    const defaults = this.o.pools ?? { enabled: false, picker: { service: '{name}-epp', port: 9002 } };
    const wanted = ep.spec.inferencePool?.enabled ?? defaults.enabled;
    const live = pools.get(ep);
    if (wanted)
      return this.applyIfDrifted(ep, desiredInferencePool(ep, defaults.picker), live, 'inferencepool');
    if (!live) return;
    const { name, namespace } = ep.metadata;
    try {
      await this.requests.send(
        'DELETE',
        resourcePath(INFERENCE_POOL_API_VERSION, 'InferencePool', namespace!, name),
      );
    } catch (err) {
      if (!(err instanceof KubeApiError && err.code === 404)) throw err;
    }
    this.o.onWrite?.('inferencepool');
    this.o.log?.info(
      { endpoint: keyOf(namespace, name) },
      'InferencePool deleted: the endpoint no longer asks for one',
    );
  }

  /** Forget what was applied for a deleted endpoint. */
  forget(key: string): void {
    this.claimsApplied.delete(key);
  }

  private async applyIfDrifted(
    ep: DedicatedEndpoint,
    desired: KubernetesObject,
    live: KubernetesObject | undefined,
    resource: WrittenResource,
  ): Promise<void> {
    const drift = driftOf(desired, live);
    if (!drift) return;
    // Absent, or the same spec hash (not a new spec): deleted or edited by hand, or a new replica count.
    if (!live || live.metadata?.labels?.[LABEL_SPEC_HASH] === desired.metadata?.labels?.[LABEL_SPEC_HASH])
      this.o.log?.info(
        { endpoint: keyOf(ep.metadata.namespace, ep.metadata.name), resource, field: drift },
        `${resource} differs from the desired one at ${drift}; re-applying`,
      );
    if (resource === 'deployment' && live && scaleOnly(desired as V1Deployment, live as V1Deployment))
      return this.scale(desired as V1Deployment);
    await this.ssa(desired, resource);
  }

  /**
   * Only the replica count departs (a wake, a hibernation, a scale): a JSON merge patch of
   * `spec.replicas` under our field manager rather than an apply of the whole Deployment. The API
   * server then has one field to merge instead of a whole object to diff and track (server-side
   * apply's structured merge), which is the wake's latency when it is loaded (docs/benchmarks/wake.md).
   * It is a patch of the Deployment itself, not of its /scale subresource: the answer is the
   * Deployment, with its new generation, for the own-writes cache. The next full apply (a new spec)
   * takes the field back under the Apply operation, forced as always.
   */
  private async scale(desired: V1Deployment): Promise<void> {
    const { namespace, name } = desired.metadata!;
    const path = `${resourcePath('apps/v1', 'Deployment', namespace!, name!)}?fieldManager=${encodeURIComponent(FIELD_MANAGER)}`;
    const body = { spec: { replicas: desired.spec!.replicas } };
    await this.cache.ownDeployments.write(keyOf(namespace, name), () =>
      this.requests.send<V1Deployment>('PATCH', path, body, MERGE_PATCH),
    );
    this.o.onWrite?.('deployment');
  }

  private async ssa(obj: KubernetesObject, resource: WrittenResource): Promise<void> {
    const { namespace, name } = obj.metadata!;
    const path = resourcePath(obj.apiVersion!, obj.kind!, namespace!, name!);
    const apply = () => this.requests.apply(path, obj, FIELD_MANAGER);
    const key = keyOf(namespace, name);
    // The answers of Deployment and Service applies go back into the cache (the next pass sees them).
    if (resource === 'deployment')
      await this.cache.ownDeployments.write(key, apply as () => Promise<V1Deployment>);
    else if (resource === 'service')
      await this.cache.ownServices.write(key, apply as () => Promise<V1Service>);
    else await apply();
    this.o.onWrite?.(resource);
  }

  url(ep: DedicatedEndpoint): string {
    return serviceUrl(ep);
  }

  async checkSource(
    ep: DedicatedEndpoint,
    source: Exclude<ModelSource, { kind: 'hub' }>,
  ): Promise<PreflightResult> {
    const namespace = ep.metadata.namespace!;
    const unreachable = (message: string): PreflightResult => ({
      kind: 'failed',
      reason: 'ModelSourceUnreachable',
      message: `${message} Then update the endpoint spec to retry.`,
    });
    switch (source.kind) {
      case 'pvc': {
        const claim = await this.read(() =>
          this.core.readNamespacedPersistentVolumeClaim({ name: source.claim, namespace }),
        );
        if (!claim)
          return unreachable(
            `PersistentVolumeClaim ${source.claim} named by spec.model.source does not exist in namespace ${namespace}: create it with the weights${source.path ? ` under /${source.path}` : ''}, or fix spec.model.source.`,
          );
        return { kind: 'passed', message: `Weights from PersistentVolumeClaim ${source.claim}` };
      }
      case 's3': {
        const ref = ep.spec.model.credentialsSecretRef;
        let endpoint = 'https://s3.amazonaws.com';
        if (ref) {
          const secret = await this.read(() => this.core.readNamespacedSecret({ name: ref.name, namespace }));
          if (!secret)
            return unreachable(
              `Secret ${ref.name} named by spec.model.credentialsSecretRef does not exist in namespace ${namespace}: create it with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL for S3-compatible storage).`,
            );
          const url = secret.data?.AWS_ENDPOINT_URL;
          if (url) endpoint = Buffer.from(url, 'base64').toString('utf8').trim();
        }
        // Any HTTP answer means the storage is reachable (an unsigned request is refused with 403);
        // no answer within seconds is what would otherwise stall the engine's start for its whole timeout.
        const target = `${endpoint.replace(/\/+$/, '')}/${source.bucket}`;
        try {
          const res = await (this.o.fetch ?? fetch)(target, {
            method: 'HEAD',
            signal: AbortSignal.timeout(5000),
          });
          if (res.status === 404)
            return unreachable(`Bucket ${source.bucket} of spec.model.source does not exist at ${endpoint}.`);
        } catch (err) {
          return unreachable(
            `Object storage ${endpoint} for spec.model.source ${source.uri} did not answer (${errorText(err)}): check AWS_ENDPOINT_URL in the Secret named by spec.model.credentialsSecretRef and that the cluster can reach it.`,
          );
        }
        return { kind: 'passed', message: `Weights from ${source.uri}` };
      }
      case 'path':
        return { kind: 'passed', message: `Weights from the node directory ${source.path}` };
      case 'oci':
        // An image the node cannot pull surfaces as ImagePullFailed from the pod, with the kubelet's words.
        return { kind: 'passed', message: `Weights from the image ${source.reference}` };
    }
  }

  /** A read that answers undefined for 404. */
  private async read<T>(get: () => Promise<T>): Promise<T | undefined> {
    try {
      return await get();
    } catch (err) {
      if ((err as { code?: number }).code === 404) return undefined;
      throw err;
    }
  }

  async hubToken(ep: DedicatedEndpoint): Promise<HubToken> {
    const ref = ep.spec.model.hubTokenSecretRef;
    if (!ref) return { kind: 'none' };
    let secret: V1Secret;
    try {
      secret = await this.core.readNamespacedSecret({ name: ref.name, namespace: ep.metadata.namespace! });
    } catch (err) {
      if ((err as { code?: number }).code === 404) {
        return {
          kind: 'missing',
          message: `Secret ${ref.name} named by spec.model.hubTokenSecretRef does not exist in namespace ${ep.metadata.namespace}. Create it, then update the endpoint spec to retry.`,
        };
      }
      throw err;
    }
    const b64 = secret.data?.[ref.key];
    const token = b64 ? Buffer.from(b64, 'base64').toString('utf8').trim() : '';
    if (!token)
      return {
        kind: 'missing',
        message: `Secret ${ref.name} has no non-empty key "${ref.key}" (spec.model.hubTokenSecretRef.key).`,
      };
    return { kind: 'found', token };
  }
}
