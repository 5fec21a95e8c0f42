import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kubectlOk, testNamespace } from '@berth/test/cluster/env';
import { eventually } from '@berth/test/support/eventually';
import { startFakeHub } from '@berth/test/support/fake-hub';
import { Cluster, installCrd, simSpec, start, testConfig } from '@berth/test/support/operator';
import type { OperatorHandle } from '../src/operator.ts';

// Drift on the real control plane: children deleted, scaled or edited by hand (with kubectl, as a
// user would) are put back by the next reconcile, which the watch on owned objects triggers at once;
// and a resync that finds nothing drifted writes nothing (the operator's own write counter).

const EP = 'endpt-drift';
let ns: Awaited<ReturnType<typeof testNamespace>>;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let op: OperatorHandle;
let k: Cluster;

const counter = async (name: string) => {
  const m = await op.metrics.registry.getSingleMetric(name)!.get();
  return m.values.reduce((sum, v) => sum + v.value, 0);
};

beforeAll(async () => {
  await installCrd();
  ns = await testNamespace('op-drift');
  hub = await startFakeHub();
  k = new Cluster(ns.name);
  // Resync every second: a quiet endpoint is reconciled over and over while we count writes.
  op = await start(testConfig(ns.name, hub.url, { leaderElection: false, resyncSeconds: 1 }));
  await k.create(EP, { ...simSpec(), scaling: { minReplicas: 1, maxReplicas: 1, idleTimeoutSeconds: 900 } });
  await k.waitPhase(EP, 'up', 60_000);
}, 90_000);

afterAll(async () => {
  await op?.stop();
  await hub?.close();
  await k?.releaseAll();
  await ns?.remove();
});

describe('drift', () => {
  it('a resync with nothing drifted makes no write to the API server', async () => {
    // Settle: the last writes of becoming up are done.
    await eventually(
      async () => {
        const before = await counter('berth_operator_api_writes_total');
        await new Promise((r) => setTimeout(r, 1500));
        expect(await counter('berth_operator_api_writes_total')).toBe(before);
      },
      { timeout: 20_000, interval: 100 },
    );
    const writes = await counter('berth_operator_api_writes_total');
    const passes = await counter('berth_operator_reconciles_total');
    await eventually(
      async () => expect(await counter('berth_operator_reconciles_total')).toBeGreaterThanOrEqual(passes + 5),
      {
        timeout: 20_000,
        interval: 200,
      },
    );
    expect(await counter('berth_operator_api_writes_total')).toBe(writes);
  });

  it('restores a Service deleted by hand', async () => {
    const old = await k.core.readNamespacedService({ name: EP, namespace: ns.name });
    await kubectlOk(['delete', 'service', EP, '--wait=true'], { namespace: ns.name });
    const restored = await eventually(
      async () => {
        const s = await k.core.readNamespacedService({ name: EP, namespace: ns.name });
        expect(s.metadata?.uid).not.toBe(old.metadata?.uid);
        return s;
      },
      { timeout: 10_000, interval: 100 },
    );
    expect(restored.spec?.ports?.[0]).toMatchObject({ name: 'http', port: 8000 });
    expect(restored.metadata?.ownerReferences?.[0]).toMatchObject({ kind: 'DedicatedEndpoint', name: EP });
  });

  it('restores the replica count of a Deployment scaled by hand', async () => {
    await kubectlOk(['scale', `deployment/${EP}`, '--replicas=3'], { namespace: ns.name });
    // The scale lands, then the next reconcile (triggered by the Deployment's watch) takes it back.
    await eventually(async () => expect((await k.deployment(EP))?.spec?.replicas).toBe(1), {
      timeout: 10_000,
      interval: 100,
    });
    const dep = await k.deployment(EP);
    // The manager of spec.replicas (not status.replicas, which the controller manager owns).
    const replicasOwner = dep?.metadata?.managedFields?.find(
      (f) => (f.fieldsV1 as { 'f:spec'?: { 'f:replicas'?: object } } | undefined)?.['f:spec']?.['f:replicas'],
    );
    expect(replicasOwner?.manager).toBe('berth-operator');
    // Only the count departed: put back by a merge patch of that one field (an Update under our
    // manager), not a new apply of the whole Deployment; the apply's own fields stay the apply's.
    expect(replicasOwner?.operation).toBe('Update');
    expect(JSON.stringify(replicasOwner?.fieldsV1)).toBe('{"f:spec":{"f:replicas":{}}}');
    const applied = dep?.metadata?.managedFields?.find(
      (f) => f.manager === 'berth-operator' && f.operation === 'Apply',
    );
    expect(JSON.stringify(applied?.fieldsV1)).toContain('"f:template"');
  });

  it('restores a container image edited by hand (the spec hash label untouched)', async () => {
    await kubectlOk(['set', 'image', `deployment/${EP}`, 'engine=example.com/other:1'], {
      namespace: ns.name,
    });
    await eventually(
      async () =>
        expect((await k.deployment(EP))?.spec?.template.spec?.containers[0]?.image).toBe(
          'berth/engine-sim:dev',
        ),
      { timeout: 10_000, interval: 100 },
    );
    expect((await k.get(EP))?.status?.phase).toBe('up');
  });
});
