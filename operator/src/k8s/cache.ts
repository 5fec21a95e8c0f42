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
  Informer,
  KubeConfig,
  KubernetesListObject,
  KubernetesObject,
  V1Deployment,
  V1Pod,
  V1Service,
} from '@kubernetes/client-node';
import { AppsV1Api, CoreV1Api, CustomObjectsApi, makeInformer } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { wakePending } from '../core/phase.ts';
import { TerminalError } from '../core/queue.ts';
import type { Supervised } from './informers.ts';
import { supervise } from './informers.ts';
import { OwnWrites } from './own-writes.ts';
import { InferencePoolWatch } from './pools.ts';

// The operator's view of the cluster: supervised informers on DedicatedEndpoints and the children
// it owns (Deployments, Services, pods), an index of pods by endpoint, and nothing else. Informers
// only enqueue keys; the reconciler reads from these caches, with its own writes in front of them
// until the watches bring them back (own-writes.ts).
//
// Not every watch event is worth a pass. The echo of our own write is not (the pass that wrote it
// already acted on it), nor a change of a child in fields the reconcile never reads: the Deployment
// controller's status bookkeeping (observedGeneration, conditions, updated/available counts) and a
// pod's IP or phase. Each child's reconcile-relevant fields are fingerprinted, and an update that
// leaves its fingerprint unchanged enqueues nothing; the periodic resync stays the backstop.

/** An endpoint as the informer caches it, before schema parsing. */
export type RawEndpoint = KubernetesObject & { spec?: unknown; status?: DedicatedEndpointStatus };

export interface KubeCacheOptions {
  kc: KubeConfig;
  namespace: string; // '' = all namespaces
  log: Logger;
  onInformerError: () => void;
  /**
   * Called with the endpoint key whenever the endpoint or one of its children changes; `urgent` when
   * the endpoint asks to wake (core/phase.ts wakePending).
   */
  enqueue: (key: string, urgent?: boolean) => void;
  /** While the InferencePool CRD is absent, how often to ask whether it was installed (default 60 s). */
  poolRecheckMs?: number;
  /** Each watch event of an endpoint's own or its children: enqueued, our own write's echo, or unchanged for a pass. */
  onWatchEvent?: (outcome: WatchEventOutcome) => void;
}

export type WatchEventOutcome = 'enqueued' | 'echo' | 'unchanged';

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

/** What a pass reads of a Deployment: the fields drift compares (spec via its generation) and the replica counts. */
export function deploymentFingerprint(d: V1Deployment): string {
  const m = d.metadata;
  return JSON.stringify([
    m?.generation,
    m?.labels,
    m?.annotations,
    m?.ownerReferences,
    m?.deletionTimestamp,
    d.status?.replicas,
    d.status?.readyReplicas,
  ]);
}

/** What a pass reads of a Service: the fields drift compares. */
export function serviceFingerprint(s: V1Service): string {
  const m = s.metadata;
  return JSON.stringify([m?.labels, m?.annotations, m?.ownerReferences, m?.deletionTimestamp, s.spec]);
}

/** What a pass reads of an InferencePool: the fields drift compares. */
export function poolFingerprint(p: KubernetesObject & { spec?: unknown }): string {
  const m = p.metadata;
  return JSON.stringify([m?.labels, m?.annotations, m?.ownerReferences, m?.deletionTimestamp, p.spec]);
}

/** What a pass reads of a pod (observe.ts): readiness, scheduling, container states, timings. */
export function podFingerprint(p: V1Pod): string {
  return JSON.stringify([
    p.metadata?.creationTimestamp,
    p.metadata?.deletionTimestamp,
    p.status?.conditions
      ?.filter((c) => c.type === 'Ready' || c.type === 'PodScheduled')
      .map((c) => [c.type, c.status, c.reason, c.message, c.lastTransitionTime]),
    p.status?.containerStatuses?.map((c) => [c.name, c.image, c.restartCount, c.state, c.lastState]),
  ]);
}

/** Drops metadata.managedFields from an object in place (the cache's copy; see KubeCache). */
export function stripManagedFields(obj: KubernetesObject): void {
  if (obj.metadata?.managedFields) delete obj.metadata.managedFields;
}

export class KubeCache {
  readonly endpoints: Supervised<RawEndpoint>;
  readonly deployments: Supervised<V1Deployment>;
  readonly services: Supervised<V1Service>;
  private readonly pods: Supervised<V1Pod>;
  /** Pods by endpoint key, maintained from informer events (avoids scanning every pod per pass). */
  private readonly podIndex = new Map<string, Map<string, V1Pod>>();
  /** Our own writes, served until the watches deliver them. */
  readonly ownEndpoints = new OwnWrites<RawEndpoint>();
  readonly ownDeployments = new OwnWrites<V1Deployment>();
  readonly ownServices = new OwnWrites<V1Service>();
  /** InferencePools, watched only where their CRD is installed (pools.ts). */
  readonly pools: InferencePoolWatch;
  /** Each cached endpoint object, parsed (see endpoint()). */
  private readonly parsed = new WeakMap<RawEndpoint, DedicatedEndpoint>();
  /** Reconcile-relevant fingerprint per child ("kind/namespace/name"). */
  private readonly fingerprints = new Map<string, string>();

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

    // Informers only enqueue keys, and only for events that can change a pass's outcome.
    const changed = (kind: string, obj: KubernetesObject, fingerprint: string): boolean => {
      const k = `${kind}/${keyOf(obj.metadata?.namespace, obj.metadata?.name)}`;
      if (this.fingerprints.get(k) === fingerprint) return false;
      this.fingerprints.set(k, fingerprint);
      return true;
    };
    const forget = (kind: string, obj: KubernetesObject) =>
      this.fingerprints.delete(`${kind}/${keyOf(obj.metadata?.namespace, obj.metadata?.name)}`);
    const enqueue = (key: string | undefined, echo: boolean, fresh: boolean, urgent = false) => {
      if (!key) return;
      const outcome = echo ? 'echo' : fresh ? 'enqueued' : 'unchanged';
      o.onWatchEvent?.(outcome);
      if (outcome === 'enqueued') o.enqueue(key, urgent);
    };
    const nameKey = (obj: KubernetesObject) => keyOf(obj.metadata?.namespace, obj.metadata?.name);
    // The informers keep every object whole. Nothing here reads managedFields, which are often the
    // largest part of an object (a field set per manager: the API's create, our applies, the
    // kubelet's and controllers' status writes), so they are dropped from the cached object as it
    // arrives, as client-go's TransformStripManagedFields does. The first handler of each informer
    // runs before any other (registered first), on the very object the cache holds.
    for (const informer of [
      epInformer,
      depInformer,
      svcInformer,
      podInformer,
    ] as Informer<KubernetesObject>[])
      for (const verb of ['add', 'update'] as const) informer.on(verb, stripManagedFields);
    for (const verb of ['add', 'update'] as const) {
      epInformer.on(verb, (obj) =>
        enqueue(
          nameKey(obj),
          this.ownEndpoints.delivered(nameKey(obj), obj),
          true,
          wakePending(obj as DedicatedEndpoint),
        ),
      );
      depInformer.on(verb, (d) => {
        const fresh = changed('deployment', d, deploymentFingerprint(d));
        enqueue(ownerKey(d), this.ownDeployments.delivered(nameKey(d), d), fresh);
      });
      svcInformer.on(verb, (svc) => {
        const fresh = changed('service', svc, serviceFingerprint(svc));
        enqueue(ownerKey(svc), this.ownServices.delivered(nameKey(svc), svc), fresh);
      });
    }
    epInformer.on('delete', (obj) => {
      this.ownEndpoints.deleted(nameKey(obj));
      enqueue(nameKey(obj), false, true);
    });
    depInformer.on('delete', (d) => {
      forget('deployment', d);
      this.ownDeployments.deleted(nameKey(d));
      enqueue(ownerKey(d), false, true);
    });
    svcInformer.on('delete', (svc) => {
      forget('service', svc);
      this.ownServices.deleted(nameKey(svc));
      enqueue(ownerKey(svc), false, true);
    });
    for (const verb of ['add', 'update', 'delete'] as const) {
      podInformer.on(verb, (pod) => {
        const key = ownerKeyOfPod(pod);
        if (!key) return;
        const byName = this.podIndex.get(key) ?? new Map<string, V1Pod>();
        if (verb === 'delete') byName.delete(pod.metadata!.name!);
        else byName.set(pod.metadata!.name!, pod);
        if (byName.size) this.podIndex.set(key, byName);
        else this.podIndex.delete(key);
        if (verb === 'delete') {
          forget('pod', pod);
          enqueue(key, false, true);
        } else enqueue(key, false, changed('pod', pod, podFingerprint(pod)));
      });
    }
    this.pools = new InferencePoolWatch({
      kc,
      namespace: ns,
      log: o.log,
      onInformerError: o.onInformerError,
      ...(o.poolRecheckMs ? { recheckMs: o.poolRecheckMs } : {}),
      onEvent: (pool, verb) => {
        if (verb === 'delete') {
          forget('inferencepool', pool);
          return enqueue(ownerKey(pool), false, true);
        }
        enqueue(ownerKey(pool), false, changed('inferencepool', pool, poolFingerprint(pool)));
      },
      onServed: () => {
        for (const key of this.keys()) o.enqueue(key);
      },
    });
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
      this.pools.start(),
    ]);
  }

  async stop(): Promise<void> {
    await Promise.all([
      this.endpoints.stop(),
      this.deployments.stop(),
      this.services.stop(),
      this.pods.stop(),
      this.pools.stop(),
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
    const raw = this.ownEndpoints.get(key, this.endpoints.informer.get(name!, ns || undefined));
    if (!raw) return undefined;
    // Parsed once per object the watch (or a write's answer) brought, not once per pass: a change
    // replaces the cached object, and with it this entry. Passes only read the parsed endpoint.
    const known = this.parsed.get(raw);
    if (known) return known;
    const parsed = DedicatedEndpointSchema.safeParse(raw);
    if (!parsed.success) {
      throw new TerminalError(
        `${key} does not match the DedicatedEndpoint schema: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
      );
    }
    this.parsed.set(raw, parsed.data);
    return parsed.data;
  }

  deployment(ep: DedicatedEndpoint): V1Deployment | undefined {
    const { name, namespace } = ep.metadata;
    return this.ownDeployments.get(keyOf(namespace, name), this.deployments.informer.get(name, namespace));
  }

  service(ep: DedicatedEndpoint): V1Service | undefined {
    const { name, namespace } = ep.metadata;
    return this.ownServices.get(keyOf(namespace, name), this.services.informer.get(name, namespace));
  }

  podsOf(ep: DedicatedEndpoint): V1Pod[] {
    return [...(this.podIndex.get(keyOf(ep.metadata.namespace, ep.metadata.name))?.values() ?? [])];
  }
}
