import type { Catalog, DedicatedEndpoint, DedicatedEndpointStatus, InstanceType } from '@berth/crds';
import {
  API_VERSION,
  DedicatedEndpointSchema,
  FIELD_MANAGER,
  FINALIZER,
  GROUP,
  KIND,
  LABEL_ENDPOINT,
  LABEL_MANAGED_BY,
  LABEL_SPEC_HASH,
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
  V1Secret,
  V1Service,
} from '@kubernetes/client-node';
import {
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  EventsV1Api,
  KubernetesObjectApi,
  makeInformer,
  PatchStrategy,
  setHeaderOptions,
  V1MicroTime,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { HubToken } from '../core/preflight.ts';
import { TerminalError } from '../core/queue.ts';
import type { EndpointStore, WorkloadDriver } from '../core/runtime.ts';
import type { ObservedWorkload, PhaseEvent } from '../core/types.ts';
import type { BuildConfig } from './builders.ts';
import { desiredCacheClaim, desiredDeployment, desiredService, serviceUrl } from './builders.ts';
import type { Supervised } from './informers.ts';
import { supervise } from './informers.ts';
import { observeWorkload } from './observe.ts';

/** An endpoint as the informer caches it, before schema parsing. */
type RawEndpoint = KubernetesObject & { spec?: unknown; status?: DedicatedEndpointStatus };

const SSA = setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply);

export interface KubeRuntimeOptions {
  kc: KubeConfig;
  namespace: string; // '' = all namespaces
  build: BuildConfig;
  catalog: Catalog;
  crashLoopRestarts: number;
  identity: string;
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

/** Kubernetes implementation of the store and the workload driver, reading from informer caches. */
export class KubeRuntime implements EndpointStore, WorkloadDriver {
  private readonly objects: KubernetesObjectApi;
  private readonly custom: CustomObjectsApi;
  private readonly core: CoreV1Api;
  private readonly events: EventsV1Api;
  readonly endpoints: Supervised<RawEndpoint>;
  private readonly deployments: Supervised<V1Deployment>;
  private readonly services: Supervised<V1Service>;
  private readonly pods: Supervised<V1Pod>;
  /** Pods by endpoint key, maintained from informer events (avoids scanning every pod per pass). */
  private readonly podIndex = new Map<string, Map<string, V1Pod>>();

  constructor(private readonly o: KubeRuntimeOptions) {
    const { kc, namespace: ns } = o;
    this.objects = KubernetesObjectApi.makeApiClient(kc);
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.core = kc.makeApiClient(CoreV1Api);
    this.events = kc.makeApiClient(EventsV1Api);
    const apps = kc.makeApiClient(AppsV1Api);
    const scope = ns ? `/namespaces/${ns}` : '';
    const managed = `${LABEL_MANAGED_BY}=${MANAGED_BY}`;

    const epInformer = makeInformer<RawEndpoint>(
      kc,
      `/apis/${GROUP}/${VERSION}${scope}/${PLURAL}`,
      () =>
        (ns
          ? this.custom.listNamespacedCustomObject({
              group: GROUP,
              version: VERSION,
              namespace: ns,
              plural: PLURAL,
            })
          : this.custom.listClusterCustomObject({
              group: GROUP,
              version: VERSION,
              plural: PLURAL,
            })) as Promise<KubernetesListObject<RawEndpoint>>,
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
          ? this.core.listNamespacedService({ namespace: ns, labelSelector: managed })
          : this.core.listServiceForAllNamespaces({ labelSelector: managed }),
      managed,
    );
    const podInformer = makeInformer<V1Pod>(
      kc,
      `/api/v1${scope}/pods`,
      () =>
        ns
          ? this.core.listNamespacedPod({ namespace: ns, labelSelector: LABEL_ENDPOINT })
          : this.core.listPodForAllNamespaces({ labelSelector: LABEL_ENDPOINT }),
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

  // ---- EndpointStore

  get(key: string): DedicatedEndpoint | undefined {
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

  async writeStatus(ep: DedicatedEndpoint, status: DedicatedEndpointStatus): Promise<void> {
    await this.custom.patchNamespacedCustomObjectStatus(
      {
        group: GROUP,
        version: VERSION,
        namespace: ep.metadata.namespace!,
        plural: PLURAL,
        name: ep.metadata.name,
        body: {
          apiVersion: API_VERSION,
          kind: KIND,
          metadata: { name: ep.metadata.name, namespace: ep.metadata.namespace },
          status,
        },
        fieldManager: FIELD_MANAGER,
        force: true,
      },
      SSA,
    );
  }

  async setFinalizer(ep: DedicatedEndpoint, present: boolean): Promise<void> {
    try {
      await this.objects.patch(
        {
          apiVersion: API_VERSION,
          kind: KIND,
          metadata: {
            name: ep.metadata.name,
            namespace: ep.metadata.namespace,
            finalizers: present ? [FINALIZER] : [],
          },
        },
        undefined,
        undefined,
        FIELD_MANAGER,
        true,
        PatchStrategy.ServerSideApply,
      );
    } catch (err) {
      if (!present && (err as { code?: number }).code === 404) return; // already gone
      throw err;
    }
  }

  async recordEvent(ep: DedicatedEndpoint, event: PhaseEvent): Promise<void> {
    try {
      await this.events.createNamespacedEvent({
        namespace: ep.metadata.namespace!,
        body: {
          metadata: { generateName: `${ep.metadata.name}-`, namespace: ep.metadata.namespace },
          eventTime: new V1MicroTime(),
          reportingController: 'berth.dev/operator',
          reportingInstance: this.o.identity.slice(0, 128),
          action: 'Reconcile',
          reason: event.reason,
          note: event.message.slice(0, 1024),
          type: event.type,
          regarding: {
            apiVersion: API_VERSION,
            kind: KIND,
            name: ep.metadata.name,
            namespace: ep.metadata.namespace,
            uid: ep.metadata.uid,
          },
        },
      });
    } catch (err) {
      // Events are best effort: a lost event must not fail the pass (status already says it).
      this.o.log.warn(
        {
          endpoint: keyOf(ep.metadata.namespace, ep.metadata.name),
          reason: event.reason,
          err: apiErrorText(err),
        },
        'could not record event',
      );
    }
  }

  // ---- WorkloadDriver

  async observe(ep: DedicatedEndpoint): Promise<ObservedWorkload> {
    const key = keyOf(ep.metadata.namespace, ep.metadata.name);
    const dep = this.deployments.informer.get(ep.metadata.name, ep.metadata.namespace);
    const pods = [...(this.podIndex.get(key)?.values() ?? [])];
    return observeWorkload(dep, pods, { crashLoopRestarts: this.o.crashLoopRestarts });
  }

  async apply(
    ep: DedicatedEndpoint,
    instanceType: InstanceType | undefined,
    replicas: number,
  ): Promise<void> {
    const { name, namespace } = ep.metadata;
    const cached = this.deployments.informer.get(name, namespace);
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
    const cachedSvc = this.services.informer.get(name, namespace);
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

function ownerKeyOfPod(pod: V1Pod): string | undefined {
  const name = pod.metadata?.labels?.[LABEL_ENDPOINT];
  return name ? keyOf(pod.metadata?.namespace, name) : undefined;
}

/** A short description of a client-node ApiException: HTTP code and the Status message. */
export function apiErrorText(err: unknown): string {
  const e = err as { code?: number; body?: unknown; message?: string };
  let message = e.message ?? String(err);
  try {
    const body = typeof e.body === 'string' ? JSON.parse(e.body) : e.body;
    if (body && typeof body === 'object' && 'message' in body)
      message = String((body as { message: unknown }).message);
  } catch {
    // not JSON: keep the exception message
  }
  return e.code ? `HTTP ${e.code}: ${message}` : message;
}
