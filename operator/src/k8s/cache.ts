import type { DedicatedEndpoint, DedicatedEndpointStatus } from '@berth/crds';
import {
  API_VERSION,
  DedicatedEndpointSchema,
  GROUP,
  KIND,
  LABEL_ENDPOINT,
  LABEL_MANAGED_BY,
  MANAGED_BY,
  PLURAL,
  VERSION,
} from '@berth/crds';
import type {
  KubeConfig,
  KubernetesListObject,
  KubernetesObject,
  V1Deployment,
  V1Pod,
  V1Service,
} from '@kubernetes/client-node';
import { AppsV1Api, CoreV1Api, CustomObjectsApi, makeInformer } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { TerminalError } from '../core/queue.ts';
import type { Supervised } from './informers.ts';
import { supervise } from './informers.ts';

// The operator's view of the cluster: supervised informers on DedicatedEndpoints and the children
// it owns (Deployments, Services, pods), an index of pods by endpoint, and nothing else. Informers
// only enqueue keys; the reconciler reads from these caches.

/** An endpoint as the informer caches it, before schema parsing. */
export type RawEndpoint = KubernetesObject & { spec?: unknown; status?: DedicatedEndpointStatus };

export interface KubeCacheOptions {
  kc: KubeConfig;
  namespace: string; // '' = all namespaces
  log: Logger;
  onInformerError: () => void;
  /** Called with the endpoint key whenever the endpoint or one of its children changes. */
  enqueue: (key: string) => void;
}

export const keyOf = (ns: string | undefined, name: string | undefined) => `${ns ?? ''}/${name ?? ''}`;

/** The endpoint a child belongs to: its controller owner reference, else the endpoint label. */
export function ownerKey(obj: KubernetesObject): string | undefined {
  const ns = obj.metadata?.namespace;
  const owner = obj.metadata?.ownerReferences?.find(
    (o) => o.controller && o.kind === KIND && o.apiVersion === API_VERSION,
  );
  const name = owner?.name ?? obj.metadata?.labels?.[LABEL_ENDPOINT];
  return name ? keyOf(ns, name) : undefined;
}

function ownerKeyOfPod(pod: V1Pod): string | undefined {
  const name = pod.metadata?.labels?.[LABEL_ENDPOINT];
  return name ? keyOf(pod.metadata?.namespace, name) : undefined;
}

export class KubeCache {
  readonly endpoints: Supervised<RawEndpoint>;
  readonly deployments: Supervised<V1Deployment>;
  readonly services: Supervised<V1Service>;
  private readonly pods: Supervised<V1Pod>;
  /** Pods by endpoint key, maintained from informer events (avoids scanning every pod per pass). */
  private readonly podIndex = new Map<string, Map<string, V1Pod>>();

  constructor(o: KubeCacheOptions) {
    const { kc, namespace: ns } = o;
    const custom = kc.makeApiClient(CustomObjectsApi);
    const core = kc.makeApiClient(CoreV1Api);
    const apps = kc.makeApiClient(AppsV1Api);
    const scope = ns ? `/namespaces/${ns}` : '';
    const managed = `${LABEL_MANAGED_BY}=${MANAGED_BY}`;

    const epInformer = makeInformer<RawEndpoint>(
      kc,
      `/apis/${GROUP}/${VERSION}${scope}/${PLURAL}`,
      () =>
        (ns
          ? custom.listNamespacedCustomObject({
              group: GROUP,
              version: VERSION,
              namespace: ns,
              plural: PLURAL,
            })
          : custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL })) as Promise<
          KubernetesListObject<RawEndpoint>
        >,
    );
    const depInformer = makeInformer<V1Deployment>(
      kc,
      `/apis/apps/v1${scope}/deployments`,
      () =>
        ns
          ? apps.listNamespacedDeployment({ namespace: ns, labelSelector: managed })
          : apps.listDeploymentForAllNamespaces({ labelSelector: managed }),
      managed,
    );
    const svcInformer = makeInformer<V1Service>(
      kc,
      `/api/v1${scope}/services`,
      () =>
        ns
          ? core.listNamespacedService({ namespace: ns, labelSelector: managed })
          : core.listServiceForAllNamespaces({ labelSelector: managed }),
      managed,
    );
    const podInformer = makeInformer<V1Pod>(
      kc,
      `/api/v1${scope}/pods`,
      () =>
        ns
          ? core.listNamespacedPod({ namespace: ns, labelSelector: LABEL_ENDPOINT })
          : core.listPodForAllNamespaces({ labelSelector: LABEL_ENDPOINT }),
      LABEL_ENDPOINT,
    );

    // Informers only enqueue keys.
    const own = (obj: KubernetesObject) => {
      const key = ownerKey(obj);
      if (key) o.enqueue(key);
    };
    for (const verb of ['add', 'update', 'delete'] as const) {
      epInformer.on(verb, (obj) => o.enqueue(keyOf(obj.metadata?.namespace, obj.metadata?.name)));
      depInformer.on(verb, own);
      svcInformer.on(verb, own);
      podInformer.on(verb, (pod) => {
        const key = ownerKeyOfPod(pod);
        if (!key) return;
        const byName = this.podIndex.get(key) ?? new Map<string, V1Pod>();
        if (verb === 'delete') byName.delete(pod.metadata!.name!);
        else byName.set(pod.metadata!.name!, pod);
        if (byName.size) this.podIndex.set(key, byName);
        else this.podIndex.delete(key);
        o.enqueue(key);
      });
    }
    this.endpoints = supervise('dedicatedendpoints', epInformer, o.log, o.onInformerError);
    this.deployments = supervise('deployments', depInformer, o.log, o.onInformerError);
    this.services = supervise('services', svcInformer, o.log, o.onInformerError);
    this.pods = supervise('pods', podInformer, o.log, o.onInformerError);
  }

  async start(): Promise<void> {
    await Promise.all([
      this.endpoints.start(),
      this.deployments.start(),
      this.services.start(),
      this.pods.start(),
    ]);
  }

  async stop(): Promise<void> {
    await Promise.all([
      this.endpoints.stop(),
      this.deployments.stop(),
      this.services.stop(),
      this.pods.stop(),
    ]);
  }

  /** Every endpoint key in the cache (periodic resync). */
  keys(): string[] {
    return this.endpoints.informer.list().map((e) => keyOf(e.metadata?.namespace, e.metadata?.name));
  }

  listEndpoints(): readonly RawEndpoint[] {
    return this.endpoints.informer.list();
  }

  /** The endpoint by key, parsed; one that does not match the schema is a terminal error. */
  endpoint(key: string): DedicatedEndpoint | undefined {
    const [ns, name] = key.split('/');
    const raw = this.endpoints.informer.get(name!, ns || undefined);
    if (!raw) return undefined;
    const parsed = DedicatedEndpointSchema.safeParse(raw);
    if (!parsed.success) {
      throw new TerminalError(
        `${key} does not match the DedicatedEndpoint schema: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
      );
    }
    return parsed.data;
  }

  deployment(ep: DedicatedEndpoint): V1Deployment | undefined {
    return this.deployments.informer.get(ep.metadata.name, ep.metadata.namespace);
  }

  service(ep: DedicatedEndpoint): V1Service | undefined {
    return this.services.informer.get(ep.metadata.name, ep.metadata.namespace);
  }

  podsOf(ep: DedicatedEndpoint): V1Pod[] {
    return [...(this.podIndex.get(keyOf(ep.metadata.namespace, ep.metadata.name))?.values() ?? [])];
  }
}
