// What GitOps tools see of a DedicatedEndpoint in each phase, on the local control plane with the
// operator driving real endpoints through building → up → hibernated → waking, and to failed:
//   - kstatus (sigs.k8s.io/cli-utils v0.37.2, what Flux and kpt wait on), built with Go
//     (test/gitops), on the object as read and on the live object through KUBECONFIG;
//   - the Argo CD health check the chart ships, run as Argo CD runs it;
//   - `kubectl wait --for=condition=Ready` on an up endpoint.
// Each phase must read as issue 18 asks: in progress while starting, current when settled
// (scale-to-zero is settled on purpose), failed with its reason when failed.
import { ANNOTATION_WAKE_REQUESTED, type DedicatedEndpoint, type Phase } from '@berth/crds';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kubectlOk, testNamespace } from '../cluster/env.ts';
import {
  argocdHealth,
  kstatus,
  kstatusLive,
  type KstatusResult,
  type KstatusStatus,
} from '../gitops/tools.ts';
import type { OperatorHandle } from '@berth/operator';
import { startFakeHub } from '../support/fake-hub.ts';
import { Cluster, installCrd, simSpec, start, testConfig } from '../support/operator.ts';

/** In progress while starting, current when settled (scale-to-zero is settled), failed when failed. */
const KSTATUS: Record<Phase, KstatusStatus> = {
  building: 'InProgress',
  waking: 'InProgress',
  up: 'Current',
  hibernated: 'Current',
  failed: 'Failed',
};

/** The condition kstatus reports as the cause for each phase (none when Current). */
const KSTATUS_CONDITION: Record<Phase, string[]> = {
  building: ['Reconciling'],
  waking: ['Reconciling'],
  up: [],
  hibernated: [],
  failed: ['Stalled'],
};

const ARGO: Record<Phase, string> = {
  building: 'Progressing',
  waking: 'Progressing',
  up: 'Healthy',
  hibernated: 'Healthy',
  failed: 'Degraded',
};

const SLOW = 'endpt-gitops';
const HUGE = 'endpt-gitops-huge';

let ns: Awaited<ReturnType<typeof testNamespace>>;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let op: OperatorHandle;
let k: Cluster;
/** Each phase's object as the API server returned it, taken the moment the phase was seen. */
const seen = new Map<Phase, DedicatedEndpoint>();
/** kstatus of each of those objects. */
const computed = new Map<Phase, KstatusResult>();
/** kstatus of the live object (read by the Go program itself), for the phases that stay put. */
const live = new Map<Phase, KstatusResult>();
let readyWait = '';

beforeAll(async () => {
  await installCrd();
  ns = await testNamespace('gitops');
  hub = await startFakeHub();
  k = new Cluster(ns.name);
  op = await start(testConfig(ns.name, hub.url, { leaderElection: false }));

  // Ready 10 s after start: long enough to catch building and waking, short enough to be quick.
  await k.create(SLOW, {
    ...simSpec('org/small', { 'sim.berth.dev/ready-after': '10s' }),
    scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
  });
  await k.create(HUGE, { ...simSpec('org/huge'), hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 } });

  seen.set('building', await k.waitPhase(SLOW, 'building', 20_000));
  seen.set('failed', await k.waitPhase(HUGE, 'failed', 30_000, 'ModelTooLarge'));
  live.set('failed', await kstatusLive('dedicatedendpoints.berth.dev', HUGE, ns.name));

  seen.set('up', await k.waitPhase(SLOW, 'up', 60_000));
  live.set('up', await kstatusLive('endpt', SLOW, ns.name));
  readyWait = await kubectlOk(
    ['wait', '--for=condition=Ready', `dedicatedendpoint/${SLOW}`, '--timeout=10s'],
    {
      namespace: ns.name,
    },
  );

  seen.set('hibernated', await k.waitPhase(SLOW, 'hibernated', 60_000));
  live.set('hibernated', await kstatusLive('dedicatedendpoints.berth.dev', SLOW, ns.name));

  await k.mergePatch(SLOW, {
    metadata: { annotations: { [ANNOTATION_WAKE_REQUESTED]: new Date().toISOString() } },
  });
  seen.set('waking', await k.waitPhase(SLOW, 'waking', 20_000));
  await k.waitPhase(SLOW, 'up', 60_000);

  for (const [phase, ep] of seen) computed.set(phase, await kstatus(ep));
}, 240_000);

afterAll(async () => {
  await op?.stop();
  await hub?.close();
  await k?.releaseAll();
  await ns?.remove();
});

const phases = Object.keys(KSTATUS) as Phase[];

describe('kstatus (cli-utils v0.37.2) on DedicatedEndpoints', () => {
  const status = (phase: Phase) => computed.get(phase)?.status;

  it('is InProgress for building and waking, Current for up and hibernated, Failed for failed', () => {
    expect(Object.fromEntries(phases.map((p) => [p, status(p)]))).toEqual(KSTATUS);
    for (const phase of phases)
      expect(
        computed.get(phase)?.conditions.map((c) => c.type),
        phase,
      ).toEqual(KSTATUS_CONDITION[phase]);
  });

  it('says the same of the live objects (read through KUBECONFIG by the Go program)', () => {
    expect([...live.keys()].sort()).toEqual(['failed', 'hibernated', 'up']);
    for (const [phase, result] of live) expect(result.status, `live ${phase}`).toBe(KSTATUS[phase]);
  });

  it('names the failure: Failed carries the reason and the operator message', () => {
    const failed = seen.get('failed')!;
    expect(computed.get('failed')?.conditions).toEqual([
      expect.objectContaining({ type: 'Stalled', reason: 'ModelTooLarge', message: failed.status!.message }),
    ]);
    expect(live.get('failed')?.message).toBe(failed.status!.message);
  });

  it('sees observedGeneration on the status and on every condition of every phase', () => {
    for (const [phase, ep] of seen) {
      const generation = ep.metadata.generation;
      expect(ep.status?.observedGeneration, phase).toBe(generation);
      expect(ep.status?.conditions?.length, phase).toBe(5);
      for (const c of ep.status!.conditions!)
        expect(c.observedGeneration, `${phase} ${c.type}`).toBe(generation);
    }
  });

  it('reports the generation check on its own: a spec the operator has not observed is InProgress', async () => {
    const up = structuredClone(seen.get('up')!);
    up.metadata.generation = (up.metadata.generation ?? 1) + 1;
    expect(await kstatus(up)).toMatchObject({
      status: 'InProgress',
      conditions: [expect.objectContaining({ type: 'Reconciling', reason: 'LatestGenerationNotObserved' })],
    });
  });
});

describe('the Argo CD health check shipped with the chart, on the same objects', () => {
  it('meets the goal for every phase: Progressing, Healthy, Degraded with the reason and message', async () => {
    for (const phase of phases) {
      const ep = seen.get(phase)!;
      const health = await argocdHealth(ep);
      expect(health.status, phase).toBe(ARGO[phase]);
      expect(health.message, phase).toBe(`${ep.status!.reason}: ${ep.status!.message}`);
    }
  });
});

describe('kubectl wait', () => {
  it('--for=condition=Ready returns for an up endpoint', () => {
    expect(readyWait.trim()).toBe(`dedicatedendpoint.berth.dev/${SLOW} condition met`);
  });
});
