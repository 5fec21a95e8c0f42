import { GROUP, LABEL_ENDPOINT, PLURAL, VERSION } from '@berth/crds';
import { CoordinationV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testNamespace } from '@berth/test/cluster/env';
import { eventually } from '@berth/test/support/eventually';
import { startFakeHub } from '@berth/test/support/fake-hub';
import { Cluster, installCrd, simSpec, start, testConfig } from '@berth/test/support/operator';

// Two operator replicas (leader election), and an operator restarted in the middle of its work.

let hub: Awaited<ReturnType<typeof startFakeHub>>;
const cleanups: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  await installCrd();
  hub = await startFakeHub();
});
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
  await hub?.close();
});

async function holder(k: Cluster): Promise<string | undefined> {
  const lease = await k.kc
    .makeApiClient(CoordinationV1Api)
    .readNamespacedLease({ name: 'berth-operator', namespace: k.namespace });
  return lease.spec?.holderIdentity;
}

describe('leader election', () => {
  it('one of two replicas leads; the other takes over when it stops', async () => {
    const ns = await testNamespace('op-ha');
    const k = new Cluster(ns.name);
    cleanups.push(ns.remove, () => k.releaseAll());
    const a = await start(testConfig(ns.name, hub.url, { identity: 'replica-a' }));
    cleanups.push(() => a.stop());
    await eventually(() => expect(a.isLeader()).toBe(true), { timeout: 15_000 });
    const b = await start(testConfig(ns.name, hub.url, { identity: 'replica-b' }));
    cleanups.push(() => b.stop());

    await k.create('endpt-ha-one', simSpec());
    await k.waitPhase('endpt-ha-one', 'up', 40_000);
    expect(b.isLeader()).toBe(false);
    expect(await holder(k)).toBe('replica-a');
    // The standby is healthy but not reconciling.
    expect((await fetch(`http://127.0.0.1:${b.metricsPort}/readyz`)).status).toBe(200);
    expect(await (await fetch(`http://127.0.0.1:${b.metricsPort}/metrics`)).text()).toMatch(
      /berth_operator_leader 0/,
    );

    await a.stop(); // graceful: releases the lease, so B need not wait for it to expire
    await eventually(() => expect(b.isLeader()).toBe(true), { timeout: 10_000 });
    expect(await holder(k)).toBe('replica-b');

    await k.create('endpt-ha-two', simSpec());
    await k.waitPhase('endpt-ha-two', 'up', 40_000);
    // The first endpoint stays as it was: one Deployment, still up.
    expect((await k.get('endpt-ha-one'))?.status?.phase).toBe('up');
  }, 120_000);

  it('takes over an expired lease from a replica that vanished without releasing it', async () => {
    const ns = await testNamespace('op-ha2');
    cleanups.push(ns.remove);
    const k = new Cluster(ns.name);
    const lease = k.kc.makeApiClient(CoordinationV1Api);
    const { V1MicroTime } = await import('@kubernetes/client-node');
    await lease.createNamespacedLease({
      namespace: ns.name,
      body: {
        metadata: { name: 'berth-operator' },
        spec: {
          holderIdentity: 'crashed-replica',
          leaseDurationSeconds: 4,
          renewTime: new V1MicroTime(),
          leaseTransitions: 3,
        },
      },
    });
    const c = await start(testConfig(ns.name, hub.url, { identity: 'replica-c' }));
    cleanups.push(() => c.stop());
    await new Promise((r) => setTimeout(r, 2000));
    expect(c.isLeader()).toBe(false); // not before the lease expires
    await eventually(() => expect(c.isLeader()).toBe(true), { timeout: 15_000 });
    const l = await lease.readNamespacedLease({ name: 'berth-operator', namespace: ns.name });
    expect(l.spec).toMatchObject({ holderIdentity: 'replica-c', leaseTransitions: 4 });
  }, 60_000);
});

describe('operator restart', () => {
  it('an operator stopped mid-reconcile leaves no duplicate or orphaned object after a restart', async () => {
    const ns = await testNamespace('op-restart');
    const k = new Cluster(ns.name);
    cleanups.push(ns.remove, () => k.releaseAll());
    const names = Array.from({ length: 8 }, (_, i) => `endpt-r${i}`);
    const first = await start(testConfig(ns.name, hub.url, { identity: 'first', concurrency: 2 }));
    await Promise.all(names.map((n) => k.create(n, simSpec())));
    // Stop as soon as the first child exists: some endpoints are done, some half-done, some untouched.
    await eventually(async () => {
      const deps = await k.apps.listNamespacedDeployment({ namespace: ns.name });
      expect(deps.items.length).toBeGreaterThan(0);
    });
    await first.stop();
    // While no operator runs, one endpoint is deleted (its finalizer keeps it until an operator runs).
    await k.delete('endpt-r0');

    const second = await start(testConfig(ns.name, hub.url, { identity: 'second' }));
    cleanups.push(() => second.stop());
    for (const n of names.slice(1)) await k.waitPhase(n, 'up', 60_000);
    await eventually(async () => expect(await k.get('endpt-r0')).toBeUndefined(), { timeout: 30_000 });

    await eventually(
      async () => {
        const deps = await k.apps.listNamespacedDeployment({ namespace: ns.name });
        const svcs = await k.core.listNamespacedService({ namespace: ns.name });
        const owners = (items: Array<{ metadata?: { labels?: Record<string, string> } }>) =>
          items.map((d) => d.metadata?.labels?.[LABEL_ENDPOINT]).sort();
        expect(owners(deps.items)).toEqual(names.slice(1)); // one each, none for the deleted endpoint
        expect(owners(svcs.items)).toEqual(names.slice(1));
        const pods = await k.core.listNamespacedPod({ namespace: ns.name });
        expect(
          pods.items
            .filter((p) => !p.metadata?.deletionTimestamp)
            .map((p) => p.metadata?.labels?.[LABEL_ENDPOINT])
            .sort(),
        ).toEqual(names.slice(1));
      },
      { timeout: 60_000 },
    );
    const list = (await k.custom.listNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns.name,
      plural: PLURAL,
    })) as { items: unknown[] };
    expect(list.items).toHaveLength(7);
  }, 180_000);
});
