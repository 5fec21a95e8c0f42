import type { DedicatedEndpoint, DedicatedEndpointStatus } from '@berth/crds';
import { API_VERSION, FIELD_MANAGER, FINALIZER, KIND } from '@berth/crds';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { EndpointStore } from '../core/runtime.ts';
import type { PhaseEvent } from '../core/types.ts';
import { errorText } from '../core/error-text.ts';
import { keyOf, type KubeCache, type RawEndpoint } from './cache.ts';
import type { WrittenResource } from './driver.ts';
import { endpointPath, JSON_PATCH, KubeRequests, microTime, resourcePath } from './requests.ts';

// The reconciler's writes to the endpoint resource itself: status through /status, the finalizer,
// and Kubernetes Events. Reads come from the cache; the answers of our writes go back into it
// (own-writes.ts), so the next pass reads what this one wrote.
//
// The finalizer: the API creates endpoints with it already present (no write here for those); one
// created another way (kubectl) gets it by server-side apply. It is removed by a JSON patch that
// tests the entry first, since server-side apply removes only entries its field manager owns and
// the API's create owns the entry on the endpoints it created.

export class KubeEndpointStore implements EndpointStore {
  private readonly cache: KubeCache;
  private readonly o: { identity: string; log: Logger; onWrite?: (resource: WrittenResource) => void };
  private readonly requests: KubeRequests;
  /** The last Event recorded per endpoint key, so a transition is never recorded twice in a row. */
  private readonly lastEvent = new Map<string, string>();

  constructor(
    cache: KubeCache,
    kc: KubeConfig,
    o: { identity: string; log: Logger; onWrite?: (resource: WrittenResource) => void },
  ) {
    this.cache = cache;
    this.o = o;
    this.requests = new KubeRequests(kc);
  }

  get(key: string): DedicatedEndpoint | undefined {
    return this.cache.endpoint(key);
  }

  async writeStatus(ep: DedicatedEndpoint, status: DedicatedEndpointStatus): Promise<void> {
    const { name, namespace } = ep.metadata;
    await this.cache.ownEndpoints.write(keyOf(namespace, name), () =>
      this.requests.apply<RawEndpoint>(
        endpointPath(namespace!, name, 'status'),
        { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace }, status } as RawEndpoint,
        FIELD_MANAGER,
      ),
    );
    this.o.onWrite?.('status');
  }

  async setFinalizer(ep: DedicatedEndpoint, present: boolean): Promise<void> {
    const { name, namespace } = ep.metadata;
    const key = keyOf(namespace, name);
    if (present) {
      await this.cache.ownEndpoints.write(key, () =>
        this.requests.apply<RawEndpoint>(
          endpointPath(namespace!, name),
          { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace, finalizers: [FINALIZER] } },
          FIELD_MANAGER,
        ),
      );
      this.o.onWrite?.('finalizer');
      return;
    }
    const at = (ep.metadata.finalizers ?? []).indexOf(FINALIZER);
    if (at < 0) return;
    try {
      // The test fails (422) if the list changed since the cache saw it: the pass is retried on the newer object.
      await this.cache.ownEndpoints.write(key, () =>
        this.requests.send<RawEndpoint>(
          'PATCH',
          endpointPath(namespace!, name),
          [
            { op: 'test', path: `/metadata/finalizers/${at}`, value: FINALIZER },
            { op: 'remove', path: `/metadata/finalizers/${at}` },
          ],
          JSON_PATCH,
        ),
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
      await this.requests.send('POST', resourcePath('events.k8s.io/v1', 'Event', ep.metadata.namespace!), {
        apiVersion: 'events.k8s.io/v1',
        kind: 'Event',
        metadata: { generateName: `${ep.metadata.name}-`, namespace: ep.metadata.namespace },
        eventTime: microTime(),
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
