import type { DedicatedEndpoint, InstanceType } from '@berth/crds';
import { FIELD_MANAGER, LABEL_SPEC_HASH } from '@berth/crds';
import type { KubeConfig, KubernetesObject, V1Secret } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { CoreV1Api, KubernetesObjectApi, PatchStrategy } from '@kubernetes/client-node';
import type { HubToken } from '../core/preflight.ts';
import type { WorkloadDriver } from '../core/runtime.ts';
import type { ObservedWorkload } from '../core/types.ts';
import type { BuildConfig } from './builders.ts';
import { desiredCacheClaim, desiredDeployment, desiredService, serviceUrl } from './builders.ts';
import { keyOf, type KubeCache } from './cache.ts';
import { driftOf } from './drift.ts';
import { observeWorkload } from './observe.ts';

// The endpoint's workload on Kubernetes: a Deployment, a Service and optionally a model-cache PVC,
// server-side applied from the pure builders when the cache shows they differ (drift.ts); observed
// from the Deployment and its pods.

/** What the operator writes, as the writes metric labels it. */
export type WrittenResource =
  'deployment' | 'service' | 'persistentvolumeclaim' | 'status' | 'finalizer' | 'event';

export class KubeWorkloadDriver implements WorkloadDriver {
  private readonly objects: KubernetesObjectApi;
  private readonly core: CoreV1Api;
  /** Endpoint key → `uid/size` of the model-cache claim applied for it. */
  private readonly claimsApplied = new Map<string, string>();

  constructor(
    private readonly cache: KubeCache,
    kc: KubeConfig,
    private readonly o: {
      build: BuildConfig;
      crashLoopRestarts: number;
      log?: Logger;
      /** Every write to the API server (a metric: a quiet resync writes nothing). */
      onWrite?: (resource: WrittenResource) => void;
    },
  ) {
    this.objects = KubernetesObjectApi.makeApiClient(kc);
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
        await this.objects.delete({
          apiVersion: 'apps/v1',
          kind: 'Deployment',
          metadata: { name, namespace },
        });
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
    await this.applyIfDrifted(ep, desiredService(ep), this.cache.service(ep), 'service');
    await this.applyIfDrifted(ep, desiredDeployment(ep, instanceType, build, replicas), cached, 'deployment');
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
    await this.ssa(desired, resource);
  }

  private async ssa(obj: KubernetesObject, resource: WrittenResource): Promise<void> {
    await this.objects.patch(obj, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
    this.o.onWrite?.(resource);
  }

  url(ep: DedicatedEndpoint): string {
    return serviceUrl(ep);
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
