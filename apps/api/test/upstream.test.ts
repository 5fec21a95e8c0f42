// The upstream call: the phase gate, wake and hold as typed outcomes, replica choice by least in
// flight per endpoint, retries moving to another replica, and release counting down exactly once.
import {
  ANNOTATION_LAST_ACTIVITY,
  ANNOTATION_WAKE_FIRST_BYTE,
  ANNOTATION_WAKE_REQUESTED,
  type DedicatedEndpoint,
  type Phase,
} from '@berth/crds';
import { Listeners } from '@berth/operator';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { Backends, Endpoints } from '../src/dedicated/ports.ts';
import { platformUpstream } from '../src/dedicated/upstream/endpoint-upstream.ts';
import { leastInFlight, NO_KEY, ReplicaTable, type ReplicaLoad } from '../src/dedicated/upstream/replicas.ts';
import { endpointObject } from './support/endpoint.ts';

const logger = pino({ level: 'silent' });

function endpoint(id: string, phase: Phase, status: Record<string, unknown> = {}): DedicatedEndpoint {
  return endpointObject(id, { phase, ...status });
}

/** Endpoints and replica addresses the test sets, with watches as the runtimes have them. */
function world() {
  const eps = new Map<string, DedicatedEndpoint>();
  const addrs = new Map<string, readonly string[]>();
  const epWatch = new Listeners<DedicatedEndpoint | undefined>();
  const addrWatch = new Listeners<readonly string[]>();
  const annotations: Record<string, string>[] = [];
  const endpoints: Pick<Endpoints, 'get' | 'watch' | 'annotate'> = {
    get: (id) => eps.get(id),
    watch: (id, fn) => epWatch.add(id, fn),
    annotate: async (_id, a) => void annotations.push(a),
  };
  const backends: Backends = {
    ready: async () => {},
    addresses: (id) => addrs.get(id) ?? [],
    watch: (id, fn) => addrWatch.add(id, fn),
    close: async () => {},
  };
  return {
    endpoints,
    backends,
    annotations,
    set(e: DedicatedEndpoint | undefined, id = e?.metadata.name ?? '') {
      if (e) eps.set(id, e);
      else eps.delete(id);
      epWatch.emit(id, e);
    },
    ready(id: string, list: string[]) {
      addrs.set(id, list);
      addrWatch.emit(id, list);
    },
  };
}

const signal = () => new AbortController().signal;

describe('platformUpstream.acquire', () => {
  it('refuses a building or failed endpoint without counting it', async () => {
    const w = world();
    const up = platformUpstream({ ...w, logger });
    expect(await up.acquire(endpoint('endpt-a', 'building'), { hold: 1000, signal: signal() })).toEqual({
      ok: false,
      reason: 'building',
    });
    const failed = endpoint('endpt-a', 'failed', { reason: 'CrashLoop' });
    expect(await up.acquire(failed, { hold: 1000, signal: signal() })).toEqual({
      ok: false,
      reason: 'failed',
      endpoint: failed,
    });
    expect(up.inFlight('endpt-a')).toBe(0);
    await up.close();
  });

  it('wakes a hibernated endpoint once and answers `waking` at once with no hold', async () => {
    const w = world();
    const e = endpoint('endpt-a', 'hibernated', { hibernatedAt: new Date().toISOString() });
    w.set(e);
    const up = platformUpstream({ ...w, logger });
    // No wake of it measured yet: the configured default (30 s), less the wake's age.
    const waking = { ok: false, reason: 'waking', retryAfter: 30 };
    expect(await up.acquire(e, { hold: 0, signal: signal() })).toEqual(waking);
    expect(await up.acquire(e, { hold: 0, signal: signal() })).toEqual(waking);
    expect(up.wakesSignalled).toBe(1);
    expect(up.inFlight('endpt-a')).toBe(0);
    await up.close();
  });

  it('a call that wakes the endpoint writes once: the wake and its traffic in one annotation', async () => {
    const w = world();
    const e = endpoint('endpt-w', 'hibernated', { hibernatedAt: new Date().toISOString() });
    w.set(e);
    const up = platformUpstream({ ...w, logger });
    const held = up.acquire(e, { hold: 5000, signal: signal() });
    await new Promise((r) => setTimeout(r, 20));
    // One write for the operator to act on (it reconciles once per write, in order).
    expect(w.annotations).toHaveLength(1);
    const [a] = w.annotations;
    expect(a![ANNOTATION_WAKE_REQUESTED]).toBeDefined();
    expect(a![ANNOTATION_LAST_ACTIVITY]).toBe(a![ANNOTATION_WAKE_REQUESTED]);
    w.ready('endpt-w', ['http://10.0.0.3:8000']);
    const got = await held;
    if (got.ok) got.lease.release();
    await up.close();
  });

  it('tells the runtime of the wake directly, before the annotation is written, with the same time', async () => {
    const w = world();
    const told: { id: string; at: string; annotated: number }[] = [];
    let written!: () => void;
    const endpoints = {
      ...w.endpoints,
      // The annotation's write takes long (a busy API server); the direct signal does not wait for it.
      annotate: (_id: string, a: Record<string, string>) =>
        a[ANNOTATION_WAKE_REQUESTED]
          ? new Promise<void>((r) => (written = () => r(void w.annotations.push(a))))
          : w.endpoints.annotate(_id, a),
      signalWake: (id: string, at: string) => told.push({ id, at, annotated: w.annotations.length }),
    };
    const e = endpoint('endpt-t', 'hibernated', { hibernatedAt: new Date().toISOString() });
    w.set(e);
    const up = platformUpstream({ ...w, endpoints, logger });
    const held = up.acquire(e, { hold: 5000, signal: signal() });
    const again = up.acquire(e, { hold: 5000, signal: signal() });
    await new Promise((r) => setTimeout(r, 20));
    expect(told).toHaveLength(1);
    expect(told[0]).toMatchObject({ id: 'endpt-t', annotated: 0 });
    written();
    await new Promise((r) => setTimeout(r, 20));
    expect(w.annotations[0]![ANNOTATION_WAKE_REQUESTED]).toBe(told[0]!.at);
    w.ready('endpt-t', ['http://10.0.0.4:8000']);
    for (const got of await Promise.all([held, again])) if (got.ok) got.lease.release();
    expect(told).toHaveLength(1);
    await up.close();
  });

  it('holds until a replica is ready, and counts the held call as in flight until release', async () => {
    const w = world();
    const e = endpoint('endpt-a', 'waking');
    w.set(e);
    const up = platformUpstream({ ...w, logger });
    const pending = up.acquire(e, { hold: 5000, signal: signal() });
    await new Promise((r) => setTimeout(r, 20));
    expect(up.inFlight('endpt-a')).toBe(1);
    w.ready('endpt-a', ['http://10.0.0.1:8000']);
    const got = await pending;
    if (!got.ok) throw new Error(got.reason);
    expect(got.lease.next()).toBe('http://10.0.0.1:8000/v1');
    got.lease.release();
    got.lease.release();
    expect(up.inFlight('endpt-a')).toBe(0);
    await up.close();
  });

  it('ends a hold with timeout, failed (the endpoint as last seen), deleted or aborted', async () => {
    const w = world();
    const e = endpoint('endpt-a', 'waking');
    w.set(e);
    const up = platformUpstream({ ...w, logger });
    expect(await up.acquire(e, { hold: 30, signal: signal() })).toEqual({
      ok: false,
      reason: 'timeout',
      retryAfter: 30,
    });

    const failing = up.acquire(e, { hold: 5000, signal: signal() });
    const failed = endpoint('endpt-a', 'failed', { reason: 'WakeTimeout' });
    setTimeout(() => w.set(failed), 20);
    expect(await failing).toEqual({ ok: false, reason: 'failed', endpoint: failed });

    w.set(e);
    const deleting = up.acquire(e, { hold: 5000, signal: signal() });
    setTimeout(() => w.set(undefined, 'endpt-a'), 20);
    expect(await deleting).toEqual({ ok: false, reason: 'deleted' });

    w.set(e);
    const controller = new AbortController();
    const aborting = up.acquire(e, { hold: 5000, signal: controller.signal });
    setTimeout(() => controller.abort(), 20);
    expect(await aborting).toEqual({ ok: false, reason: 'aborted' });
    expect(up.inFlight('endpt-a')).toBe(0);
    await up.close();
  });

  it('holds at most scaling.maxHeldRequests calls; the next gets `full` with the measured Retry-After and no second wake', async () => {
    const w = world();
    const now = Date.now();
    const e = endpoint('endpt-a', 'hibernated', {
      hibernatedAt: new Date(now - 60_000).toISOString(),
      // The last wake took 42 s from its signal to a Ready engine.
      lastWake: {
        requestedAt: '2026-11-26T10:00:00.000Z',
        scaledAt: '2026-11-26T10:00:00.050Z',
        engineReadyAt: '2026-11-26T10:00:42.000Z',
      },
    });
    e.spec.scaling.maxHeldRequests = 2;
    w.set(e);
    const firstBytes: number[] = [];
    const up = platformUpstream({ ...w, logger, onFirstByte: (_id, s) => firstBytes.push(s) });
    const held = [
      up.acquire(e, { hold: 5000, signal: signal() }),
      up.acquire(e, { hold: 5000, signal: signal() }),
    ];
    await new Promise((r) => setTimeout(r, 20));
    expect(up.holding('endpt-a')).toBe(2);
    // The wake this process signalled, 12 s ago as the resource now says: 42 − 12 = 30 s left.
    const signalled = w.annotations.find((a) => a[ANNOTATION_WAKE_REQUESTED])![ANNOTATION_WAKE_REQUESTED]!;
    const woken = endpoint('endpt-a', 'waking', { wakeStartedAt: signalled, lastWake: e.status!.lastWake });
    woken.spec.scaling.maxHeldRequests = 2;
    woken.metadata.annotations = { [ANNOTATION_WAKE_REQUESTED]: new Date(now - 12_000).toISOString() };
    w.set(woken);
    expect(await up.acquire(e, { hold: 5000, signal: signal() })).toEqual({
      ok: false,
      reason: 'full',
      retryAfter: 30,
      limit: 2,
    });
    expect(w.annotations.filter((a) => a[ANNOTATION_WAKE_REQUESTED])).toHaveLength(1);
    expect(up.wakesSignalled).toBe(1);

    w.ready('endpt-a', ['http://10.0.0.1:8000']);
    const leases = await Promise.all(held);
    for (const got of leases) {
      if (!got.ok) throw new Error(got.reason);
      expect(got.wake!.heldMs).toBeGreaterThanOrEqual(15);
      // The first byte of each held call's answer: once per wake counts.
      got.wake!.firstByte();
      got.lease.release();
    }
    expect(firstBytes).toHaveLength(1);
    expect(w.annotations.filter((a) => a[ANNOTATION_WAKE_FIRST_BYTE])).toHaveLength(1);
    expect(up.holding('endpt-a')).toBe(0);
    expect(up.inFlight('endpt-a')).toBe(0);
    // A call that found a Ready replica was not held: no wake to report.
    const warm = await up.acquire(woken, { hold: 5000, signal: signal() });
    expect(warm.ok && warm.wake).toBeUndefined();
    if (warm.ok) warm.lease.release();
    await up.close();
  });

  it('a burst at a sleeping endpoint holds maxHeldRequests calls, not more, while its wake is being written', async () => {
    const w = world();
    const e = endpoint('endpt-b', 'hibernated', { hibernatedAt: new Date().toISOString() });
    e.spec.scaling.maxHeldRequests = 2;
    w.set(e);
    const up = platformUpstream({ ...w, logger });
    const burst = Array.from({ length: 5 }, () => up.acquire(e, { hold: 5000, signal: signal() }));
    await new Promise((r) => setTimeout(r, 20));
    expect(up.holding('endpt-b')).toBe(2);
    w.ready('endpt-b', ['http://10.0.0.2:8000']);
    const got = await Promise.all(burst);
    expect(got.filter((g) => g.ok)).toHaveLength(2);
    expect(got.filter((g) => !g.ok && g.reason === 'full')).toHaveLength(3);
    for (const g of got) if (g.ok) g.lease.release();
    expect(up.wakesSignalled).toBe(1);
    await up.close();
  });

  it('maxHeldRequests 0 holds nothing: `full` at once, and the wake is still signalled', async () => {
    const w = world();
    const e = endpoint('endpt-z', 'hibernated', { hibernatedAt: new Date().toISOString() });
    e.spec.scaling.maxHeldRequests = 0;
    w.set(e);
    const up = platformUpstream({ ...w, logger, wakeRetryAfterSeconds: 45 });
    expect(await up.acquire(e, { hold: 5000, signal: signal() })).toEqual({
      ok: false,
      reason: 'full',
      retryAfter: 45,
      limit: 0,
    });
    expect(up.wakesSignalled).toBe(1);
    await up.close();
  });

  it('spreads calls over the replicas by least in flight, per endpoint, and retries on another one', async () => {
    const w = world();
    const a = endpoint('endpt-a', 'up');
    const b = endpoint('endpt-b', 'up');
    w.set(a);
    w.set(b);
    w.ready('endpt-a', ['http://r1:8000', 'http://r2:8000']);
    w.ready('endpt-b', ['http://r3:8000']);
    const up = platformUpstream({ ...w, logger });
    const lease = async (e: DedicatedEndpoint) => {
      const got = await up.acquire(e, { hold: 0, signal: signal() });
      if (!got.ok) throw new Error(got.reason);
      return got.lease;
    };
    // Three long calls on endpoint a: 2 on one replica, 1 on the other; calls to b do not disturb a.
    const held = [await lease(a), await lease(a), await lease(a)];
    const first = held.map((l) => l.next());
    expect(first).toEqual(['http://r1:8000/v1', 'http://r2:8000/v1', 'http://r1:8000/v1']);
    expect((await lease(b)).next()).toBe('http://r3:8000/v1');
    // The next call on a goes to the replica with fewer in flight.
    const next = await lease(a);
    expect(next.next()).toBe('http://r2:8000/v1');
    // A retry moves to the other replica.
    expect(next.next()).toBe('http://r1:8000/v1');
    for (const l of [...held, next]) l.release();
    expect(up.inFlight('endpt-a')).toBe(0);
    await up.close();
  });
});

describe('leastInFlight over a ReplicaTable', () => {
  it('takes turns among idle replicas, and keeps counts when the address list changes', () => {
    let list: readonly string[] = ['http://r1', 'http://r2'];
    const table = new ReplicaTable(() => list, '/v1');
    const set = table.of('e');
    const picks = Array.from({ length: 4 }, () => leastInFlight(set, undefined, NO_KEY).address);
    expect(picks).toEqual(['http://r1/v1', 'http://r2/v1', 'http://r1/v1', 'http://r2/v1']);
    set.replicas[0]!.inFlight = 3;
    list = ['http://r1', 'http://r2', 'http://r3'];
    const grown = table.of('e');
    expect(grown.replicas.map((r: ReplicaLoad) => [r.address, r.inFlight])).toEqual([
      ['http://r1/v1', 3],
      ['http://r2/v1', 0],
      ['http://r3/v1', 0],
    ]);
    expect(table.of('e')).toBe(grown);
    expect(leastInFlight(grown, grown.replicas[1], NO_KEY).address).toBe('http://r3/v1');
    list = [];
    expect(table.of('e').replicas).toEqual([]);
  });

  it('gives the only replica even to a retry that failed on it', () => {
    const table = new ReplicaTable(() => ['http://r1'], '/v1');
    const set = table.of('e');
    expect(leastInFlight(set, set.replicas[0], NO_KEY).address).toBe('http://r1/v1');
  });
});
