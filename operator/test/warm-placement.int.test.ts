import { ANNOTATION_WAKE_REQUESTED, type DedicatedEndpoint } from '@berth/crds';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testNamespace } from '@berth/test/cluster/env';
import { eventually } from '@berth/test/support/eventually';
import { startFakeHub } from '@berth/test/support/fake-hub';
import { Cluster, installCrd, simSpec, start, testConfig } from '@berth/test/support/operator';
import type { OperatorHandle } from '../src/operator.ts';

// Warm placement on the real control plane (kwok's two H100 nodes): an endpoint that ran on node A
// hibernates and wakes onto A while A has room, elsewhere at once when A is full, and its status
// says which (status.lastWake: node, placement warm or cold, each stage's time).

const EP = 'endpt-warm';
const GPU = 'nvidia.com/gpu';
let ns: Awaited<ReturnType<typeof testNamespace>>;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let op: OperatorHandle;
let k: Cluster;
let first = '';

const status = async () => (await k.get(EP))?.status ?? {};
const wake = () =>
  k.mergePatch(EP, { metadata: { annotations: { [ANNOTATION_WAKE_REQUESTED]: new Date().toISOString() } } });

/** GPUs of a node no live pod requests. */
async function freeGpus(node: string): Promise<number> {
  const n = await k.core.readNode({ name: node });
  const pods = await k.core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${node}` });
  const used = pods.items
    .filter((p) => !['Succeeded', 'Failed'].includes(p.status?.phase ?? ''))
    .flatMap((p) => p.spec?.containers ?? [])
    .reduce((sum, c) => sum + Number(c.resources?.requests?.[GPU] ?? 0), 0);
  return Number(n.status?.allocatable?.[GPU] ?? 0) - used;
}

async function wokeOn(): Promise<NonNullable<DedicatedEndpoint['status']>['lastWake']> {
  await k.waitPhase(EP, 'hibernated', 60_000);
  await wake();
  await k.waitPhase(EP, 'up', 60_000);
  return eventually(
    async () => ((await status()).lastWake?.engineReadyAt ? (await status()).lastWake : false),
    {
      // Written by the pass after the pod turns Ready (resync 2 s); 15 s was too short once in the
      // full suite with a benchmark sharing the 2 cores.
      timeout: 45_000,
      interval: 200,
      description: 'the wake receipt complete',
    },
  );
}

beforeAll(async () => {
  await installCrd();
  ns = await testNamespace('op-warm');
  hub = await startFakeHub();
  k = new Cluster(ns.name);
  op = await start(testConfig(ns.name, hub.url, { leaderElection: false, resyncSeconds: 2 }));
  await k.create(EP, {
    ...simSpec('org/small', { 'sim.berth.dev/ready-after': '1s' }),
    hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
    scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
  });
  await k.waitPhase(EP, 'up', 60_000);
}, 90_000);

afterAll(async () => {
  await op?.stop();
  await hub?.close();
  await k?.releaseAll();
  await ns?.remove();
});

describe('warm placement', () => {
  it('records the node a replica ran on', async () => {
    const s = await eventually(async () => ((await status()).warmNodes?.length ? status() : false), {
      timeout: 15_000,
      interval: 200,
    });
    first = s.warmNodes![0]!.name;
    expect(first).toMatch(/^gpu-h100-/);
  });

  it('hibernated, it prefers that node; woken, it lands there and the receipt says warm', async () => {
    const receipt = await wokeOn();
    expect((await status()).preferredNodes).toEqual([first]);
    const template = (await k.deployment(EP))!.spec!.template.spec!;
    expect(
      template.affinity?.nodeAffinity?.preferredDuringSchedulingIgnoredDuringExecution?.[0],
    ).toMatchObject({
      preference: { matchFields: [{ key: 'metadata.name', operator: 'In', values: [first] }] },
    });
    expect(template.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution).toBeUndefined();
    expect(receipt).toMatchObject({ node: first, placement: 'warm' });
    for (const stage of ['requestedAt', 'scaledAt', 'scheduledAt', 'imageReadyAt', 'engineReadyAt'] as const)
      expect(Date.parse(receipt![stage]!), stage).not.toBeNaN();
    expect(receipt!.requestedAt! <= receipt!.scaledAt).toBe(true);
    expect(receipt!.scaledAt <= receipt!.engineReadyAt!).toBe(true);
  }, 120_000);

  it('when that node is full, it wakes elsewhere at once and the receipt says cold', async () => {
    await k.waitPhase(EP, 'hibernated', 60_000);
    const free = await freeGpus(first);
    expect(free).toBeGreaterThan(0);
    await k.core.createNamespacedPod({
      namespace: ns.name,
      body: {
        metadata: { name: 'filler' },
        spec: {
          nodeName: first,
          tolerations: [{ key: GPU, operator: 'Exists', effect: 'NoSchedule' }],
          containers: [
            {
              name: 'gpu',
              image: 'filler',
              resources: { requests: { [GPU]: String(free) }, limits: { [GPU]: String(free) } },
            },
          ],
        },
      },
    });
    try {
      const started = Date.now();
      const receipt = await wokeOn();
      expect(receipt!.node).not.toBe(first);
      expect(receipt!.node).toMatch(/^gpu-h100-/);
      expect(receipt!.placement).toBe('cold');
      // Never held back by the preference: scheduled as soon as the replica count was written.
      expect(Date.parse(receipt!.scheduledAt!) - Date.parse(receipt!.scaledAt)).toBeLessThan(5_000);
      expect(Date.now() - started).toBeLessThan(90_000);
      // The node it ran on now leads the warm list.
      expect((await status()).warmNodes![0]!.name).toBe(receipt!.node);
    } finally {
      await k.core.deleteNamespacedPod({ namespace: ns.name, name: 'filler', gracePeriodSeconds: 0 });
    }
  }, 150_000);
});
