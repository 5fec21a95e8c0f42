import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL_ENDPOINT } from '@berth/crds';
import { loadKubeConfig, testNamespace } from '@berth/test/cluster/env';
import { eventually } from '@berth/test/support/eventually';
import { startFakeHub } from '@berth/test/support/fake-hub';
import { Cluster, installCrd, simSpec, start, testConfig } from '@berth/test/support/operator';
import { servePodEngines, type PodEngines } from '@berth/test/support/pod-engines';
import type { OperatorHandle } from '../src/operator.ts';

// One download per node on the real control plane (kwok's H100 nodes): five replicas of an endpoint
// waking together on the node it ran on fetch its weights from the hub once; the other four wait
// for that download. Each pod is served by an engine simulator that sees its node's disk (the
// operator's hostPath cache volume, one directory per node), so what one pod leaves there is there
// for the next pod on that node — and for no pod on another node.

const EP = 'endpt-five';
const MODEL = 'org/five';
let ns: Awaited<ReturnType<typeof testNamespace>>;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let engines: PodEngines;
let op: OperatorHandle;
let k: Cluster;
let disks: string;

/** The endpoint's live pods (not terminating), by name → node. */
async function pods(): Promise<Map<string, string>> {
  const list = await k.core.listNamespacedPod({
    namespace: ns.name,
    labelSelector: `${LABEL_ENDPOINT}=${EP}`,
  });
  return new Map(
    list.items
      .filter((p) => !p.metadata?.deletionTimestamp && p.status?.phase === 'Running')
      .map((p) => [p.metadata!.name!, p.spec?.nodeName ?? '']),
  );
}

beforeAll(async () => {
  await installCrd();
  ns = await testNamespace('op-node-cache');
  hub = await startFakeHub({ [MODEL]: { parameters: { BF16: 500_000_000 } } });
  disks = mkdtempSync(path.join(os.tmpdir(), 'berth-node-disks-'));
  engines = await servePodEngines(
    loadKubeConfig(),
    ns.name,
    { ttftMs: 0, itlMs: 0, outputTokens: 4 },
    { nodeDisks: disks },
  );
  k = new Cluster(ns.name);
  op = await start(testConfig(ns.name, hub.url, { leaderElection: false, resyncSeconds: 2 }));
}, 60_000);

afterAll(async () => {
  await op?.stop();
  await engines?.close();
  await hub?.close();
  await k?.releaseAll();
  await ns?.remove();
  if (disks) rmSync(disks, { recursive: true, force: true });
});

describe('weights on the node', () => {
  it('five replicas waking together on one node download the weights once; the others wait for it', async () => {
    // The engine downloads for 1 s when its node lacks the weights (the simulator's model of it).
    await k.create(EP, {
      ...simSpec(MODEL, { 'sim.berth.dev/ready-after': '1s' }),
      engine: {
        podAnnotations: { 'sim.berth.dev/ready-after': '1s' },
        env: [{ name: 'SIM_WEIGHTS_DOWNLOAD_MS', value: '1000' }],
      },
      scaling: { minReplicas: 0, maxReplicas: 5, idleTimeoutSeconds: 15 },
    });
    await k.waitPhase(EP, 'up', 60_000);
    // Its first replica fetched the weights onto its node's disk.
    const [first] = [...(await pods()).values()];
    expect(first).toMatch(/^gpu-h100-/);
    await eventually(() => expect(hub.downloads(MODEL)).toBe(1), { timeout: 15_000 });
    expect(readdirSync(disks)).toEqual([first]);

    // It sleeps; the node loses its cache meanwhile (a cold node, as after an eviction).
    await k.waitPhase(EP, 'hibernated', 60_000);
    await eventually(async () => expect((await pods()).size).toBe(0), { timeout: 30_000 });
    rmSync(path.join(disks, first!), { recursive: true, force: true });

    // Woken with five replicas at once: they prefer the node it ran on, and all start there together.
    const startedBefore = engines.started;
    await k.mergePatch(EP, { spec: { scaling: { minReplicas: 5 } } });
    await eventually(() => expect(engines.forEndpoint(EP)).toHaveLength(5), {
      timeout: 60_000,
      interval: 100,
    });
    await Promise.all(engines.forEndpoint(EP).map((s) => s.ready));
    expect(engines.started - startedBefore).toBe(5);
    const nodes = new Set((await pods()).values());
    expect([...nodes]).toEqual([first]);
    // One GET of the weights for the five: the first took the lock, the others waited for it.
    expect(hub.downloads(MODEL)).toBe(2);
    await k.waitPhase(EP, 'up', 60_000);
  }, 180_000);
});
