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
import { keyOf, type KubeCache, type RawEndpoint } from './cache.ts';
import type { WrittenResource } from './driver.ts';

// The reconciler's writes to the endpoint resource itself: status through /status, the finalizer,
// and Kubernetes Events. Reads come from the cache; the answers of our writes go back into it
// (own-writes.ts), so the next pass reads what this one wrote.
//
// The finalizer: the API creates endpoints with it already present (no write here for those); one
// created another way (kubectl) gets it by server-side apply. It is removed by a JSON patch that
// tests the entry first, since server-side apply removes only entries its field manager owns and
// the API's create owns the entry on the endpoints it created.

const SSA = setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply);
const JSON_PATCH = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);

export class KubeEndpointStore implements EndpointStore {
  private readonly objects: KubernetesObjectApi;
  private readonly custom: CustomObjectsApi;
  private readonly events: EventsV1Api;
  /** The last Event recorded per endpoint key, so a transition is never recorded twice in a row. */
  private readonly lastEvent = new Map<string, string>();

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
    const { name, namespace } = ep.metadata;
    await this.cache.ownEndpoints.write(
      keyOf(namespace, name),
      async () =>
        (await this.custom.patchNamespacedCustomObjectStatus(
          {
            group: GROUP,
            version: VERSION,
            namespace: namespace!,
            plural: PLURAL,
            name,
            body: { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace }, status },
            fieldManager: FIELD_MANAGER,
            force: true,
          },
          SSA,
        )) as RawEndpoint,
    );
    this.o.onWrite?.('status');
  }

  async setFinalizer(ep: DedicatedEndpoint, present: boolean): Promise<void> {
    const { name, namespace } = ep.metadata;
    const key = keyOf(namespace, name);
    if (present) {
      await this.cache.ownEndpoints.write(key, () =>
        this.objects.patch(
          { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace, finalizers: [FINALIZER] } },
          undefined,
          undefined,
          FIELD_MANAGER,
          true,
          PatchStrategy.ServerSideApply,
        ),
      );
      this.o.onWrite?.('finalizer');
      return;
    }
    const at = (ep.metadata.finalizers ?? []).indexOf(FINALIZER);
    if (at < 0) return;
    try {
      // The test fails (422) if the list changed since the cache saw it: the pass is retried on the newer object.
      await this.cache.ownEndpoints.write(
        key,
        async () =>
          (await this.custom.patchNamespacedCustomObject(
            {
              group: GROUP,
              version: VERSION,
              namespace: namespace!,
              plural: PLURAL,
              name,
              body: [
                { op: 'test', path: `/metadata/finalizers/${at}`, value: FINALIZER },
                { op: 'remove', path: `/metadata/finalizers/${at}` },
              ],
            },
            JSON_PATCH,
          )) as RawEndpoint,
      );
      this.o.onWrite?.('finalizer');
      this.lastEvent.delete(key);
    } catch (err) {
      if ((err as { code?: number }).code === 404) return; // already gone
      throw err;
    }
  }

  /** Forget what was kept for an endpoint that is gone. */
  forget(key: string): void {
    this.lastEvent.delete(key);
  }

  async recordEvent(ep: DedicatedEndpoint, event: PhaseEvent): Promise<void> {
    const key = keyOf(ep.metadata.namespace, ep.metadata.name);
    const said = `${ep.metadata.uid}\n${event.type}\n${event.reason}\n${event.message}`;
    if (this.lastEvent.get(key) === said) return;
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
      this.lastEvent.set(key, said);
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
