import type { DedicatedEndpoint, InstanceType } from '@berth/crds';
import { FIELD_MANAGER, LABEL_SPEC_HASH } from '@berth/crds';
import type { KubeConfig, V1Secret } from '@kubernetes/client-node';
import { CoreV1Api, KubernetesObjectApi, PatchStrategy } from '@kubernetes/client-node';
import type { HubToken } from '../core/preflight.ts';
import type { WorkloadDriver } from '../core/runtime.ts';
import type { ObservedWorkload } from '../core/types.ts';
import type { BuildConfig } from './builders.ts';
import { desiredCacheClaim, desiredDeployment, desiredService, serviceUrl } from './builders.ts';
import type { KubeCache } from './cache.ts';
import { observeWorkload } from './observe.ts';

// The endpoint's workload on Kubernetes: a Deployment, a Service and optionally a model-cache PVC,
// server-side applied from the pure builders when the cache shows they differ; observed from the
// Deployment and its pods.

export class KubeWorkloadDriver implements WorkloadDriver {
  private readonly objects: KubernetesObjectApi;
  private readonly core: CoreV1Api;

  constructor(
    private readonly cache: KubeCache,
    kc: KubeConfig,
    private readonly o: { build: BuildConfig; crashLoopRestarts: number },
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
      if (cached)
        await this.objects.delete({
          apiVersion: 'apps/v1',
          kind: 'Deployment',
          metadata: { name, namespace },
        });
      return;
    }
    const build = this.o.build;
    if (build.modelCache.kind === 'pvc') {
      const claim = desiredCacheClaim(ep, build.modelCache);
      await this.objects.patch(
        claim,
        undefined,
        undefined,
        FIELD_MANAGER,
        true,
        PatchStrategy.ServerSideApply,
      );
    }
    const svc = desiredService(ep);
    const cachedSvc = this.cache.service(ep);
    if (cachedSvc?.metadata?.labels?.[LABEL_SPEC_HASH] !== svc.metadata!.labels![LABEL_SPEC_HASH]) {
      await this.objects.patch(svc, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
    }
    const dep = desiredDeployment(ep, instanceType, build, replicas);
    // Apply whole when anything we own differs; the spec hash label stands for the template.
    if (
      cached?.metadata?.labels?.[LABEL_SPEC_HASH] !== dep.metadata!.labels![LABEL_SPEC_HASH] ||
      cached?.spec?.replicas !== replicas
    ) {
      await this.objects.patch(dep, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
    }
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
