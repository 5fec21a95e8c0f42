// Local mode's endpoint store: rows in the API's database served from an in-process cache (the
// local "API server and informer" in one). One process owns the database, so the cache is the truth
// once loaded, and every write goes to the database first, then the cache, then the listeners (but
// annotations, hints the reconciler acts on at once: the cache first, see `annotate`). It has
// two views of the same objects: the API's (by id: read, create, delete, annotate) and the
// reconciler's (by key, `local/<id>`: status, finalizer, events).
import { randomUUID } from 'node:crypto';
import {
  ANNOTATION_DISPLAY_NAME,
  API_VERSION,
  DedicatedEndpointSpecSchema,
  FINALIZER,
  KIND,
  type DedicatedEndpoint,
  type DedicatedEndpointSpecInput,
  type DedicatedEndpointStatus,
} from '@berth/crds';
import { Listeners } from '../core/listeners.ts';
import { wakePending } from '../core/phase.ts';
import type { EndpointStore as ReconcilerStore } from '../core/runtime.ts';
import type { PhaseEvent } from '../core/types.ts';

/** The namespace local endpoints report, so reconcile keys look like Kubernetes ones. */
export const LOCAL_NAMESPACE = 'local';

/** Where local endpoints are kept (the API's database; Prisma stays in the API's repositories). */
export interface LocalEndpointRepository {
  all(): Promise<DedicatedEndpoint[]>;
  insert(e: DedicatedEndpoint): Promise<void>;
  setStatus(id: string, status: DedicatedEndpointStatus): Promise<void>;
  /** A new spec (a new generation) and annotations, written together. */
  setSpec(
    id: string,
    change: { spec: DedicatedEndpoint['spec']; generation: number; annotations: Record<string, string> },
  ): Promise<void>;
  setAnnotations(id: string, annotations: Record<string, string>): Promise<void>;
  setFinalizers(id: string, finalizers: string[]): Promise<void>;
  markDeleted(id: string, at: Date): Promise<boolean>;
  remove(id: string): Promise<void>;
}

export interface LocalEndpointStore {
  /** Fills the cache from the repository (before it, the store is empty). */
  load(): Promise<void>;
  get(id: string): DedicatedEndpoint | undefined;
  list(): DedicatedEndpoint[];
  create(input: {
    id: string;
    displayName: string;
    spec: DedicatedEndpointSpecInput;
  }): Promise<DedicatedEndpoint>;
  /**
   * Replaces the spec and display name; a changed spec bumps the generation (as the Kubernetes API
   * server does). Rejects with `code: 404` for an unknown or terminating id, `code: 409` when
   * `generation` is given and is not the current one.
   */
  update(
    id: string,
    input: { displayName: string; spec: DedicatedEndpointSpecInput; generation?: number },
  ): Promise<DedicatedEndpoint>;
  /** False when it did not exist. */
  delete(id: string): Promise<boolean>;
  /** Merges annotations (activity, wake requests); an unknown id rejects with `code: 404`. */
  annotate(id: string, annotations: Record<string, string>): Promise<void>;
  /** Called on every change of one endpoint (and with undefined when it is deleted). */
  watch(id: string, fn: (e: DedicatedEndpoint | undefined) => void): () => void;
  /** The reconciler's view: keys are `local/<id>`. */
  readonly reconciler: ReconcilerStore;
  /** Every reconcile key in the cache. */
  keys(): string[];
  /** Waits for the writes in progress. */
  close(): Promise<void>;
}

export interface LocalStoreOptions {
  /**
   * Called with the reconcile key whenever an endpoint is created, changed by the API or deleted;
   * `urgent` when it asks to wake (core/phase.ts wakePending).
   */
  onChange: (key: string, urgent?: boolean) => void;
  recordEvent: (ep: DedicatedEndpoint, event: PhaseEvent) => void;
}

export const keyOf = (id: string) => `${LOCAL_NAMESPACE}/${id}`;
const idOf = (key: string) => key.slice(key.indexOf('/') + 1);

export function localEndpointStore(
  repo: LocalEndpointRepository,
  opts: LocalStoreOptions,
): LocalEndpointStore {
  const cache = new Map<string, DedicatedEndpoint>();
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
    if (enqueue) opts.onChange(keyOf(id), wakePending(e));
  };
  /**
   * Changes one endpoint inside its write chain: the database first, then the cache — or, `early`,
   * the cache first (for hints the reconciler should act on at once; the write follows, and a later
   * write of the same field carries the cache's value if this one failed).
   */
  const mutate = (
    id: string,
    change: (e: DedicatedEndpoint) => { write: () => Promise<unknown>; next: DedicatedEndpoint | undefined },
    enqueue = true,
    early = false,
  ) =>
    serial(id, async () => {
      const current = cache.get(id);
      if (!current) return false;
      const { write, next } = change(current);
      if (early) publish(id, next, enqueue);
      await write();
      if (!early) publish(id, next, enqueue);
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
    async load() {
      for (const e of await repo.all()) cache.set(e.metadata.name, e);
    },
    reconciler,
    keys: () => [...cache.keys()].map(keyOf),
    get: (id) => cache.get(id),
    list: () => [...cache.values()],
    async create({ id, displayName, spec }) {
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
          // As the API does on Kubernetes: a delete before the first pass still goes through termination.
          finalizers: [FINALIZER],
        },
        spec: DedicatedEndpointSpecSchema.parse(spec),
      };
      await serial(id, async () => {
        // Writes of one id are serial, so this check and the insert cannot interleave with another.
        if (cache.has(id)) throw Object.assign(new Error(`endpoint ${id} already exists`), { code: 409 });
        await repo.insert(e);
        publish(id, e);
      });
      return e;
    },
    async update(id, { displayName, spec, generation }) {
      const next = DedicatedEndpointSpecSchema.parse(spec);
      let updated: DedicatedEndpoint | undefined;
      let conflict = false;
      await mutate(id, (e) => {
        if (e.metadata.deletionTimestamp) return { write: async () => {}, next: e };
        if (generation !== undefined && e.metadata.generation !== generation) {
          conflict = true;
          return { write: async () => {}, next: e };
        }
        const same = JSON.stringify(e.spec) === JSON.stringify(next);
        const annotations = { ...e.metadata.annotations, [ANNOTATION_DISPLAY_NAME]: displayName };
        const gen = (e.metadata.generation ?? 1) + (same ? 0 : 1);
        updated = { ...e, metadata: { ...e.metadata, generation: gen, annotations }, spec: next };
        return { write: () => repo.setSpec(id, { spec: next, generation: gen, annotations }), next: updated };
      });
      if (conflict)
        throw Object.assign(new Error(`endpoint ${id} changed since generation ${generation}`), {
          code: 409,
        });
      if (!updated) throw Object.assign(new Error(`endpoint ${id} not found`), { code: 404 });
      return updated;
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
    // Annotations are hints (traffic, a wake request, a wake's first byte): the reconciler sees them
    // before the database has them, so a wake's pass starts without waiting for a write (the wake
    // signal's share of a wake, BENCHMARKS.md). The writes of the endpoint stay in order.
    async annotate(id, annotations) {
      const found = await mutate(
        id,
        (e) => {
          const merged = { ...e.metadata.annotations, ...annotations };
          return {
            write: () => repo.setAnnotations(id, merged),
            next: { ...e, metadata: { ...e.metadata, annotations: merged } },
          };
        },
        true,
        true,
      );
      if (!found) throw Object.assign(new Error(`endpoint ${id} not found`), { code: 404 });
    },
    watch: (id, fn) => listeners.add(id, fn),
    close: async () => {
      await Promise.allSettled([...chains.values()]);
    },
  };
}
