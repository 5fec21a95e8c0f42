import { ANNOTATION_DISPLAY_NAME, API_VERSION, FINALIZER, GROUP, KIND, PLURAL, VERSION } from '@berth/crds';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testNamespace } from '@berth/test/cluster/env';
import { eventually } from '@berth/test/support/eventually';
import { startFakeHub } from '@berth/test/support/fake-hub';
import { Cluster, installCrd, simSpec, start, testConfig } from '@berth/test/support/operator';
import type { OperatorHandle } from '../src/operator.ts';

// What one endpoint costs the API server, counted by the operator's own write counter on the real
// control plane: created as the API creates it (the operator's finalizer already present), it goes
// up with no finalizer write, one apply of its Deployment and of its Service, a status write per
// observed change, and one Event per transition; terminating it removes a finalizer the operator
// did not add itself.

let ns: Awaited<ReturnType<typeof testNamespace>>;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let op: OperatorHandle;
let k: Cluster;

const writes = async (): Promise<Record<string, number>> => {
  const m = await op.metrics.registry.getSingleMetric('berth_operator_api_writes_total')!.get();
  return Object.fromEntries(m.values.map((v) => [String(v.labels.resource), v.value]));
};
/** Events recorded about the endpoint itself (its Deployment and Service share its name). */
const endpointEvents = async (name: string) =>
  (
    await k.events.listNamespacedEvent({
      namespace: ns.name,
      fieldSelector: `regarding.name=${name},regarding.kind=${KIND}`,
    })
  ).items.map((e) => e.reason ?? '');
const since = (after: Record<string, number>, before: Record<string, number>) =>
  Object.fromEntries(
    ['deployment', 'service', 'status', 'finalizer', 'event'].map((r) => [
      r,
      (after[r] ?? 0) - (before[r] ?? 0),
    ]),
  );

/** Settled: no write for 2 s. */
async function settled(): Promise<Record<string, number>> {
  return eventually(
    async () => {
      const a = await writes();
      await new Promise((r) => setTimeout(r, 2000));
      const b = await writes();
      expect(b).toEqual(a);
      return b;
    },
    { timeout: 30_000, interval: 100 },
  );
}

beforeAll(async () => {
  await installCrd();
  ns = await testNamespace('op-writes');
  hub = await startFakeHub();
  k = new Cluster(ns.name);
  op = await start(testConfig(ns.name, hub.url, { leaderElection: false }));
}, 60_000);

afterAll(async () => {
  await op?.stop();
  await hub?.close();
  await k?.releaseAll();
  await ns?.remove();
});

describe('writes per endpoint', () => {
  it('created as the API does: up with no finalizer write, one apply per child, one Event per transition; terminated, its finalizer removed', async () => {
    const before = await writes();
    await k.custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns.name,
      plural: PLURAL,
      body: {
        apiVersion: API_VERSION,
        kind: KIND,
        metadata: {
          name: 'endpt-api',
          annotations: { [ANNOTATION_DISPLAY_NAME]: 'as the API creates it' },
          finalizers: ['berth.dev/billing', FINALIZER],
        },
        spec: simSpec(),
      },
    });
    const up = await k.waitPhase('endpt-api', 'up', 60_000);
    expect(up.status?.conditions?.find((c) => c.type === 'Ready')).toMatchObject({ status: 'True' });
    const upWrites = since(await settled(), before);
    expect(upWrites).toMatchObject({ deployment: 1, service: 1, finalizer: 0 });
    // building, (the replica created,) up: never the same status twice.
    expect(upWrites.status).toBeGreaterThanOrEqual(2);
    expect(upWrites.status).toBeLessThanOrEqual(3);
    const reasons = await eventually(async () => {
      const r = await endpointEvents('endpt-api');
      expect(r).toContain('ReplicaReady');
      return r;
    });
    expect(reasons.filter((r) => r === 'ReplicaReady')).toHaveLength(1);
    expect(new Set(reasons).size, reasons.join()).toBe(reasons.length);
    expect(upWrites.event).toBe(reasons.length);

    // Deleted: the operator removes its finalizer (which the create, not the operator, put there)
    // and leaves the API's.
    await k.delete('endpt-api');
    await eventually(
      async () => expect((await k.get('endpt-api'))?.metadata.finalizers).toEqual(['berth.dev/billing']),
      {
        timeout: 30_000,
      },
    );
    expect(await endpointEvents('endpt-api')).toContain('Terminated');
    await k.mergePatch('endpt-api', { metadata: { finalizers: null } });
    await eventually(async () => expect(await k.get('endpt-api')).toBeUndefined());
  }, 120_000);

  it('created without the finalizer (kubectl): the operator adds it, once', async () => {
    const before = await writes();
    await k.create('endpt-kubectl', simSpec());
    const up = await k.waitPhase('endpt-kubectl', 'up', 60_000);
    expect(up.metadata.finalizers).toEqual([FINALIZER]);
    expect(since(await settled(), before)).toMatchObject({ deployment: 1, service: 1, finalizer: 1 });
    await k.delete('endpt-kubectl');
    await eventually(async () => expect(await k.get('endpt-kubectl')).toBeUndefined(), { timeout: 30_000 });
  }, 120_000);
});
