import type { DedicatedEndpoint, DedicatedEndpointStatus } from '@berth/crds';
import { API_VERSION, FIELD_MANAGER, FINALIZER, GROUP, KIND, PLURAL, VERSION } from '@berth/crds';
import type { KubeConfig } from '@kubernetes/client-node';
import {
  CustomObjectsApi,
  EventsV1Api,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
  V1MicroTime,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { EndpointStore } from '../core/runtime.ts';
import type { PhaseEvent } from '../core/types.ts';
import { errorText } from '../core/error-text.ts';
import { keyOf, type KubeCache } from './cache.ts';
import type { WrittenResource } from './driver.ts';

// The reconciler's writes to the endpoint resource itself: status through /status, the finalizer,
// and Kubernetes Events. Reads come from the cache.

const SSA = setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply);

export class KubeEndpointStore implements EndpointStore {
  private readonly objects: KubernetesObjectApi;
  private readonly custom: CustomObjectsApi;
  private readonly events: EventsV1Api;

  constructor(
    private readonly cache: KubeCache,
    kc: KubeConfig,
    private readonly o: { identity: string; log: Logger; onWrite?: (resource: WrittenResource) => void },
  ) {
    this.objects = KubernetesObjectApi.makeApiClient(kc);
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.events = kc.makeApiClient(EventsV1Api);
  }

  get(key: string): DedicatedEndpoint | undefined {
    return this.cache.endpoint(key);
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
    this.o.onWrite?.('status');
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
      this.o.onWrite?.('finalizer');
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
      this.o.onWrite?.('event');
    } catch (err) {
      // Events are best effort: a lost event must not fail the pass (status already says it).
      this.o.log.warn(
        {
          endpoint: keyOf(ep.metadata.namespace, ep.metadata.name),
          reason: event.reason,
          err: errorText(err),
        },
        'could not record event',
      );
    }
  }
}
