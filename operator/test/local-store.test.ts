// The local endpoint store: cache + change notifications over a repository (an in-memory fake
// here), with the API's and the reconciler's views of the same objects.
import { describe, expect, it } from 'vitest';
import { ANNOTATION_WAKE_REQUESTED, FINALIZER, type DedicatedEndpoint } from '@berth/crds';
import { keyOf, localEndpointStore, type LocalEndpointRepository } from '../src/local/store.ts';

function memoryRepo(initial: DedicatedEndpoint[] = []) {
  const rows = new Map(initial.map((e) => [e.metadata.name, structuredClone(e)]));
  const writes: string[] = [];
  const repo: LocalEndpointRepository = {
    all: async () => [...rows.values()].map((e) => structuredClone(e)),
    insert: async (e) => void rows.set(e.metadata.name, structuredClone(e)),
    setStatus: async (id, status) => {
      writes.push(`status:${id}`);
      rows.get(id)!.status = status;
    },
    setSpec: async (id, { spec, generation, annotations }) => {
      writes.push(`spec:${id}`);
      const e = rows.get(id)!;
      Object.assign(e, { spec, metadata: { ...e.metadata, generation, annotations } });
    },
    setAnnotations: async (id, annotations) => {
      writes.push(`annotations:${id}`);
      rows.get(id)!.metadata.annotations = annotations;
    },
    setFinalizers: async (id, finalizers) => void (rows.get(id)!.metadata.finalizers = finalizers),
    markDeleted: async (id, at) => {
      rows.get(id)!.metadata.deletionTimestamp = at.toISOString();
      return true;
    },
    remove: async (id) => void rows.delete(id),
  };
  return { repo, rows, writes };
}

const spec = {
  account: 'acct_1',
  model: { id: 'org/model' },
  hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
  scaling: { idleTimeoutSeconds: 15 },
};

async function setup(initial: DedicatedEndpoint[] = []) {
  const m = memoryRepo(initial);
  const changes: string[] = [];
  const events: string[] = [];
  const store = localEndpointStore(m.repo, {
    onChange: (k) => changes.push(k),
    recordEvent: (_ep, ev) => events.push(ev.reason),
  });
  await store.load();
  return { ...m, store, changes, events };
}

describe('local endpoint store', () => {
  it('creates endpoints with defaults applied, generation 1, and enqueues them', async () => {
    const { store, rows, changes } = await setup();
    const e = await store.create({ id: 'endpt-a', displayName: 'A', spec });
    // With the operator's finalizer from the start, as the API creates them on Kubernetes.
    expect(e.metadata).toMatchObject({
      name: 'endpt-a',
      namespace: 'local',
      generation: 1,
      finalizers: [FINALIZER],
    });
    expect(rows.get('endpt-a')?.metadata.finalizers).toEqual([FINALIZER]);
    expect(e.spec.scaling).toEqual({ minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 });
    expect(e.spec.model.revision).toBe('main');
    expect(rows.get('endpt-a')?.spec).toEqual(e.spec);
    expect(store.get('endpt-a')).toBe(e);
    expect(store.reconciler.get(keyOf('endpt-a'))).toBe(e);
    expect(changes).toEqual(['local/endpt-a']);
  });

  it('serves what the database held at start-up', async () => {
    const first = await setup();
    await first.store.create({ id: 'endpt-a', displayName: 'A', spec });
    const again = await setup([...first.rows.values()]);
    expect(again.store.list().map((e) => e.metadata.name)).toEqual(['endpt-a']);
    expect(again.store.keys()).toEqual(['local/endpt-a']);
  });

  it('merges annotations, notifies watchers and enqueues; concurrent merges lose nothing', async () => {
    const { store, rows, changes } = await setup();
    await store.create({ id: 'endpt-a', displayName: 'A', spec });
    const seen: Array<string | undefined> = [];
    store.watch('endpt-a', (e) => seen.push(e?.metadata.annotations?.[ANNOTATION_WAKE_REQUESTED]));
    await Promise.all([
      store.annotate('endpt-a', { [ANNOTATION_WAKE_REQUESTED]: 't1' }),
      store.annotate('endpt-a', { other: 'x' }),
    ]);
    expect(store.get('endpt-a')!.metadata.annotations).toMatchObject({
      [ANNOTATION_WAKE_REQUESTED]: 't1',
      other: 'x',
      'berth.dev/display-name': 'A',
    });
    expect(rows.get('endpt-a')!.metadata.annotations).toEqual(store.get('endpt-a')!.metadata.annotations);
    expect(seen).toEqual(['t1', 't1']);
    expect(changes.length).toBe(3);
    await expect(store.annotate('endpt-missing', { a: 'b' })).rejects.toThrow(/not found/);
  });

  it('a wake request reaches the reconciler before its database write ends; the writes stay in order', async () => {
    const m = await setup();
    await m.store.create({ id: 'endpt-a', displayName: 'A', spec });
    m.changes.length = 0;
    // A slow database: the annotation's write waits until released.
    let release = () => {};
    const slow = new Promise<void>((r) => (release = r));
    const write = m.repo.setAnnotations;
    m.repo.setAnnotations = async (id, a) => {
      await slow;
      await write(id, a);
    };
    const annotated = m.store.annotate('endpt-a', { [ANNOTATION_WAKE_REQUESTED]: 't1' });
    await new Promise((r) => setImmediate(r));
    expect(m.changes).toEqual(['local/endpt-a']);
    expect(m.store.reconciler.get(keyOf('endpt-a'))!.metadata.annotations?.[ANNOTATION_WAKE_REQUESTED]).toBe(
      't1',
    );
    expect(m.rows.get('endpt-a')!.metadata.annotations?.[ANNOTATION_WAKE_REQUESTED]).toBeUndefined();
    // The reconciler's status write, made meanwhile, goes to the database after the annotation.
    const status = m.store.reconciler.writeStatus(m.store.get('endpt-a')!, { phase: 'waking' });
    release();
    await Promise.all([annotated, status]);
    expect(m.writes).toEqual(['annotations:endpt-a', 'status:endpt-a']);
    expect(m.rows.get('endpt-a')!.metadata.annotations?.[ANNOTATION_WAKE_REQUESTED]).toBe('t1');
    expect(m.store.get('endpt-a')!.metadata.annotations?.[ANNOTATION_WAKE_REQUESTED]).toBe('t1');
    expect(m.store.get('endpt-a')!.status?.phase).toBe('waking');
  });

  it('a wake request on a sleeping endpoint is enqueued as urgent; other changes are not', async () => {
    const urgent: boolean[] = [];
    const m = memoryRepo();
    const store = localEndpointStore(m.repo, {
      onChange: (_k, u) => urgent.push(!!u),
      recordEvent: () => {},
    });
    await store.load();
    const e = await store.create({ id: 'endpt-a', displayName: 'A', spec });
    await store.reconciler.writeStatus(e, { phase: 'hibernated', hibernatedAt: '2026-11-28T10:00:00.000Z' });
    await store.annotate('endpt-a', { other: 'x' });
    await store.annotate('endpt-a', { [ANNOTATION_WAKE_REQUESTED]: '2026-11-28T10:05:00.000Z' });
    expect(urgent).toEqual([false, false, true]);
  });

  it("writes status for the reconciler without enqueueing (its own write) but tells the API's watchers", async () => {
    const { store, rows, changes, writes } = await setup();
    const e = await store.create({ id: 'endpt-a', displayName: 'A', spec });
    const phases: Array<string | undefined> = [];
    store.watch('endpt-a', (x) => phases.push(x?.status?.phase));
    await store.reconciler.writeStatus(e, { phase: 'up', reason: 'ReplicaReady' });
    expect(store.get('endpt-a')!.status?.phase).toBe('up');
    expect(rows.get('endpt-a')!.status?.phase).toBe('up');
    expect(phases).toEqual(['up']);
    expect(changes).toEqual(['local/endpt-a']);
    expect(writes).toEqual(['status:endpt-a']);
  });

  it('deletes at once without a finalizer; with one, marks it and removes it when the finalizer goes', async () => {
    const { store, rows } = await setup();
    // Without one (a row an older version created, its first pass not yet run): gone at once.
    const a = await store.create({ id: 'endpt-a', displayName: 'A', spec });
    await store.reconciler.setFinalizer(a, false);
    expect(rows.get('endpt-a')!.metadata.finalizers).toEqual([]);
    expect(await store.delete('endpt-a')).toBe(true);
    expect(store.get('endpt-a')).toBeUndefined();
    expect(rows.has('endpt-a')).toBe(false);
    expect(await store.delete('endpt-a')).toBe(false);

    await store.create({ id: 'endpt-b', displayName: 'B', spec });
    expect(store.get('endpt-b')!.metadata.finalizers).toEqual([FINALIZER]);
    const gone: boolean[] = [];
    store.watch('endpt-b', (x) => gone.push(x === undefined));
    expect(await store.delete('endpt-b')).toBe(true);
    expect(store.get('endpt-b')!.metadata.deletionTimestamp).toBeTruthy();
    expect(rows.get('endpt-b')!.metadata.deletionTimestamp).toBeTruthy();
    expect(await store.delete('endpt-b')).toBe(true); // deleting again is not an error
    await store.reconciler.setFinalizer(store.get('endpt-b')!, false);
    expect(store.get('endpt-b')).toBeUndefined();
    expect(rows.has('endpt-b')).toBe(false);
    expect(gone.at(-1)).toBe(true);
  });

  it('hands events to the log', async () => {
    const { store, events } = await setup();
    const e = await store.create({ id: 'endpt-a', displayName: 'A', spec });
    await store.reconciler.recordEvent(e, { type: 'Normal', reason: 'Provisioning', message: 'm' });
    expect(events).toEqual(['Provisioning']);
  });
});
