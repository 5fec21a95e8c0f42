// What GitOps tools see of a DedicatedEndpoint in each phase, on the local control plane with the
// operator driving real endpoints through building → up → hibernated → waking, and to failed:
//   - kstatus (sigs.k8s.io/cli-utils v0.37.2, what Flux and kpt wait on), built with Go
//     (test/gitops), on the object as read and on the live object through KUBECONFIG;
//   - the Argo CD health check the chart ships, run as Argo CD runs it;
//   - `kubectl wait --for=condition=Ready` on an up endpoint.
// kstatus is recorded as it is TODAY next to the GOAL of issue 18; the gaps are asserted as gaps,
// so this file fails (and asks for the table to be updated) the day the operator closes them.
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

/** Issue 18: in progress while starting, current when settled (scale-to-zero is settled), failed when failed. */
const KSTATUS_GOAL: Record<Phase, KstatusStatus> = {
  building: 'InProgress',
  waking: 'InProgress',
  up: 'Current',
  hibernated: 'Current',
  failed: 'Failed',
};

/**
 * What kstatus computes from today's status: the operator sets only Ready/Hibernated/Failed
 * conditions, so kstatus falls back to its Ready-condition rule (Ready=False → InProgress) and sees
 * neither a settled hibernated endpoint nor a failure (no Reconciling/Stalled conditions).
 */
const KSTATUS_TODAY: Record<Phase, KstatusStatus> = {
  building: 'InProgress',
  waking: 'InProgress',
  up: 'Current',
  hibernated: 'InProgress',
  failed: 'InProgress',
};

const ARGO_GOAL: Record<Phase, string> = {
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

const phases = Object.keys(KSTATUS_GOAL) as Phase[];

describe('kstatus (cli-utils v0.37.2) on DedicatedEndpoints', () => {
  const status = (phase: Phase) => computed.get(phase)?.status;

  it('says what KSTATUS_TODAY records, for every phase (objects as read, and the live objects)', () => {
    expect(Object.fromEntries(phases.map((p) => [p, status(p)]))).toEqual(KSTATUS_TODAY);
    expect([...live.keys()].sort()).toEqual(['failed', 'hibernated', 'up']);
    for (const [phase, result] of live) expect(result.status, `live ${phase}`).toBe(KSTATUS_TODAY[phase]);
  });

  it('meets the goal for building, waking and up', () => {
    for (const phase of ['building', 'waking', 'up'] as const)
      expect(status(phase), phase).toBe(KSTATUS_GOAL[phase]);
  });

  // Known gaps (issue 18, operator side): hibernated must be Current (settled on purpose) and failed
  // must be Failed with its reason (a Stalled condition). The day the operator closes them this
  // fails: move the phase to the test above and update KSTATUS_TODAY.
  it('does not yet meet the goal for hibernated and failed (known gaps)', () => {
    expect(status('hibernated')).not.toBe(KSTATUS_GOAL.hibernated);
    expect(status('failed')).not.toBe(KSTATUS_GOAL.failed);
    // Today a failure reads as "still reconciling", from Ready=False: nothing says it stopped.
    expect(computed.get('failed')?.conditions.map((c) => c.type)).toEqual(['Reconciling']);
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
      expect(health.status, phase).toBe(ARGO_GOAL[phase]);
      expect(health.message, phase).toBe(`${ep.status!.reason}: ${ep.status!.message}`);
    }
  });
});

describe('kubectl wait', () => {
  it('--for=condition=Ready returns for an up endpoint', () => {
    expect(readyWait.trim()).toBe(`dedicatedendpoint.berth.dev/${SLOW} condition met`);
  });
});
