// Local mode's endpoint store: rows in the embedded database, served from an in-process cache (the
// local "informer"). One process owns the database, so the cache is the truth after start-up and
// every write goes to the database first, then the cache, then the listeners. It exposes two
// views of the same objects: the API's EndpointStore (by id) and the reconciler's (by key).
import { randomUUID } from 'node:crypto';
import { ApiError } from '../../errors.ts';
import {
  API_VERSION,
  DedicatedEndpointSpecSchema,
  FINALIZER,
  KIND,
  type DedicatedEndpoint,
  type DedicatedEndpointStatus,
} from '@berth/crds';
import type { EndpointStore as ReconcilerStore, PhaseEvent } from '@berth/operator';
import { ANNOTATION_DISPLAY_NAME, Listeners, type EndpointStore } from '../store.ts';
import { LOCAL_NAMESPACE, type LocalEndpointRepository } from './repository.ts';

export interface LocalEndpointStore extends EndpointStore {
  /** The reconciler's view: keys are `local/<id>`. */
  readonly reconciler: ReconcilerStore;
  /** Every reconcile key in the cache. */
  keys(): string[];
}

export interface LocalStoreOptions {
  /** Called with the reconcile key whenever an endpoint is created, changed by the API or deleted. */
  onChange: (key: string) => void;
  recordEvent: (ep: DedicatedEndpoint, event: PhaseEvent) => void;
}

export const keyOf = (id: string) => `${LOCAL_NAMESPACE}/${id}`;
const idOf = (key: string) => key.slice(key.indexOf('/') + 1);

export async function localEndpointStore(
  repo: LocalEndpointRepository,
  opts: LocalStoreOptions,
): Promise<LocalEndpointStore> {
  const cache = new Map<string, DedicatedEndpoint>();
  for (const e of await repo.all()) cache.set(e.metadata.name, e);
  const listeners = new Listeners<DedicatedEndpoint | undefined>();
  // Writes of one endpoint are applied to the database in the order they were made.
  const chains = new Map<string, Promise<unknown>>();
  const serial = <T>(id: string, fn: () => Promise<T>): Promise<T> => {
    const next = (chains.get(id) ?? Promise.resolve()).catch(() => {}).then(fn);
    chains.set(id, next);
    void next.finally(() => chains.get(id) === next && chains.delete(id)).catch(() => {});
    return next;
  };
  const publish = (id: string, e: DedicatedEndpoint | undefined, enqueue = true) => {
    if (e) cache.set(id, e);
    else cache.delete(id);
    listeners.emit(id, e);
    if (enqueue) opts.onChange(keyOf(id));
  };
  /** Changes one endpoint: database first, then the cache (inside the endpoint's write chain). */
  const mutate = (
    id: string,
    change: (e: DedicatedEndpoint) => { write: () => Promise<unknown>; next: DedicatedEndpoint | undefined },
    enqueue = true,
  ) =>
    serial(id, async () => {
      const current = cache.get(id);
      if (!current) return false;
      const { write, next } = change(current);
      await write();
      publish(id, next, enqueue);
      return true;
    });

  const reconciler: ReconcilerStore = {
    get: (key) => cache.get(idOf(key)),
    async writeStatus(ep, status: DedicatedEndpointStatus) {
      // The reconciler's own write does not enqueue (nothing new to act on).
      await mutate(
        ep.metadata.name,
        (e) => ({ write: () => repo.setStatus(e.metadata.name, status), next: { ...e, status } }),
        false,
      );
    },
    async setFinalizer(ep, present) {
      await mutate(
        ep.metadata.name,
        (e) => {
          const id = e.metadata.name;
          const others = (e.metadata.finalizers ?? []).filter((f) => f !== FINALIZER);
          const finalizers = present ? [...others, FINALIZER] : others;
          if (e.metadata.deletionTimestamp && finalizers.length === 0)
            return { write: () => repo.remove(id), next: undefined };
          return {
            write: () => repo.setFinalizers(id, finalizers),
            next: { ...e, metadata: { ...e.metadata, finalizers } },
          };
        },
        false,
      );
    },
    async recordEvent(ep, event) {
      opts.recordEvent(ep, event);
    },
  };

  return {
    reconciler,
    keys: () => [...cache.keys()].map(keyOf),
    ready: () => Promise.resolve(),
    get: (id) => cache.get(id),
    list: () => [...cache.values()],
    async create({ id, displayName, spec, hubToken }) {
      if (hubToken) {
        throw new ApiError('validation_error', {
          message:
            'Invalid request body: hubToken: not accepted in local mode, where engines read HF_TOKEN from the API process: set HF_TOKEN and start the API again',
          param: 'hubToken',
        });
      }
      const e: DedicatedEndpoint = {
        apiVersion: API_VERSION,
        kind: KIND,
        metadata: {
          name: id,
          namespace: LOCAL_NAMESPACE,
          uid: randomUUID(),
          generation: 1,
          creationTimestamp: new Date().toISOString(),
          annotations: { [ANNOTATION_DISPLAY_NAME]: displayName },
          finalizers: [],
        },
        spec: DedicatedEndpointSpecSchema.parse(spec),
      };
      await serial(id, async () => {
        await repo.insert(e);
        publish(id, e);
      });
      return e;
    },
    async delete(id) {
      const at = new Date();
      return mutate(id, (e) => {
        if (e.metadata.deletionTimestamp) return { write: async () => {}, next: e };
        // With a finalizer the reconciler stops the processes first, then removes the row.
        if ((e.metadata.finalizers ?? []).length === 0)
          return { write: () => repo.remove(id), next: undefined };
        return {
          write: () => repo.markDeleted(id, at),
          next: { ...e, metadata: { ...e.metadata, deletionTimestamp: at.toISOString() } },
        };
      });
    },
    async annotate(id, annotations) {
      const found = await mutate(id, (e) => {
        const merged = { ...e.metadata.annotations, ...annotations };
        return {
          write: () => repo.setAnnotations(id, merged),
          next: { ...e, metadata: { ...e.metadata, annotations: merged } },
        };
      });
      if (!found) throw Object.assign(new Error(`endpoint ${id} not found`), { code: 404 });
    },
    watch: (id, fn) => listeners.add(id, fn),
    close: async () => {
      await Promise.allSettled([...chains.values()]);
    },
  };
}
