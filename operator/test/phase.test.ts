import type { DedicatedEndpoint, DedicatedEndpointStatus, Phase } from '@berth/crds';
import {
  ANNOTATION_LAST_ACTIVITY,
  ANNOTATION_WAKE_REQUESTED,
  DedicatedEndpointSpecSchema,
  PHASES,
} from '@berth/crds';
import { describe, expect, it } from 'vitest';
import { decide, replicasForLoad } from '../src/core/phase.ts';
import type { Observed } from '../src/core/types.ts';

const T0 = new Date('2026-01-01T12:00:00Z');
const ago = (s: number) => new Date(T0.getTime() - s * 1000).toISOString();
const opts = {
  deadlines: { provisioningSeconds: 1800, wakeSeconds: 600, hubUnreachableSeconds: 60 },
  scaling: { targetInFlightPerReplica: 8 },
};

function endpoint(
  status: DedicatedEndpointStatus,
  generation = 1,
  annotations: Record<string, string> = {},
): DedicatedEndpoint {
  return {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'DedicatedEndpoint',
    metadata: { name: 'endpt-test', namespace: 'ns', generation, annotations },
    spec: DedicatedEndpointSpecSchema.parse({
      account: 'acct',
      model: { id: 'org/model' },
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
    }),
    status,
  };
}

/** Starting states, written as the facts the reconciler remembered, not just the phase string. */
const STATES: Record<Phase, DedicatedEndpointStatus> = {
  building: { phase: 'building', reason: 'Provisioning', buildingSince: ago(60), preflightGeneration: 1 },
  up: { phase: 'up', reason: 'ReplicaReady', upSince: ago(2000), preflightGeneration: 1 },
  hibernated: { phase: 'hibernated', reason: 'IdleTimeout', hibernatedAt: ago(60), preflightGeneration: 1 },
  waking: { phase: 'waking', reason: 'WakeRequested', wakeStartedAt: ago(30), preflightGeneration: 1 },
  failed: {
    phase: 'failed',
    reason: 'CrashLoop',
    failure: { reason: 'CrashLoop', message: 'boom', generation: 1, at: ago(60) },
    preflightGeneration: 1,
  },
};

interface Case {
  generation?: number;
  annotations?: Record<string, string>;
  observed: Observed;
  advanceSeconds?: number;
}
const ok = { ok: true } as const;
const wl = (readyReplicas: number, extra: Partial<Observed['workload']> = {}) => ({
  replicas: 1,
  readyReplicas,
  ...extra,
});

const OBSERVATIONS: Record<string, Case> = {
  'no ready replica': { observed: { hardware: ok, workload: wl(0) } },
  'replica ready, recent traffic': {
    annotations: { [ANNOTATION_LAST_ACTIVITY]: ago(10) },
    observed: { hardware: ok, workload: wl(1) },
  },
  'replica ready, idle past timeout': {
    annotations: { [ANNOTATION_LAST_ACTIVITY]: ago(1000) },
    observed: { hardware: ok, workload: wl(1) },
  },
  'idle past timeout but requests in flight': {
    annotations: { [ANNOTATION_LAST_ACTIVITY]: ago(1000) },
    observed: { hardware: ok, workload: wl(1, { inFlight: 2 }) },
  },
  'wake requested': {
    annotations: { [ANNOTATION_WAKE_REQUESTED]: ago(1) },
    observed: { hardware: ok, workload: wl(0) },
  },
  'image pull failing': {
    observed: { hardware: ok, workload: wl(0, { failure: { kind: 'ImagePull', message: 'pull failed' } }) },
  },
  'container crash-looping': {
    observed: { hardware: ok, workload: wl(0, { failure: { kind: 'CrashLoop', message: 'exit 1' } }) },
  },
  'container OOM-killed': {
    observed: { hardware: ok, workload: wl(0, { failure: { kind: 'OutOfMemory', message: 'CUDA OOM' } }) },
  },
  'engine refused by a gated repo': {
    observed: {
      hardware: ok,
      workload: wl(0, { failure: { kind: 'GatedModel', message: 'GatedRepoError' } }),
    },
  },
  unschedulable: {
    observed: { hardware: ok, workload: wl(0, { failure: { kind: 'Unschedulable', message: '0/3 nodes' } }) },
  },
  'deadlines passed, nothing ready': {
    advanceSeconds: 3 * 3600,
    observed: { hardware: ok, workload: wl(0) },
  },
  'preflight: gated model, no token': {
    observed: {
      hardware: ok,
      workload: wl(0),
      preflight: { kind: 'failed', reason: 'GatedModelNoToken', message: 'gated' },
    },
  },
  'preflight: hub unreachable': {
    observed: { hardware: ok, workload: wl(0), preflight: { kind: 'unavailable', message: 'ECONNREFUSED' } },
  },
  'hardware not in catalog': { observed: { hardware: { ok: false, message: 'unknown' }, workload: wl(0) } },
  'new generation, checks passed': {
    generation: 2,
    observed: { hardware: ok, workload: wl(0), preflight: { kind: 'passed' } },
  },
};

type Row = [phase: Phase, reason: string, desiredReplicas: number];
// Expected outcome of every phase × every observation.
const TABLE: Record<Phase, Record<keyof typeof OBSERVATIONS, Row>> = {
  building: {
    'no ready replica': ['building', 'Provisioning', 1],
    'replica ready, recent traffic': ['up', 'ReplicaReady', 1],
    'replica ready, idle past timeout': ['up', 'ReplicaReady', 1], // idle counts from becoming up
    'idle past timeout but requests in flight': ['up', 'ReplicaReady', 1],
    'wake requested': ['building', 'Provisioning', 1],
    'image pull failing': ['failed', 'ImagePullFailed', 0],
    'container crash-looping': ['failed', 'CrashLoop', 0],
    'container OOM-killed': ['failed', 'ModelTooLarge', 0],
    'engine refused by a gated repo': ['failed', 'GatedModelNoToken', 0],
    unschedulable: ['building', 'Unschedulable', 1],
    'deadlines passed, nothing ready': ['failed', 'ProvisioningTimeout', 0],
    'preflight: gated model, no token': ['failed', 'GatedModelNoToken', 0],
    'preflight: hub unreachable': ['building', 'Provisioning', 1],
    'hardware not in catalog': ['failed', 'UnknownInstanceType', 0],
    'new generation, checks passed': ['building', 'Provisioning', 1],
  },
  up: {
    'no ready replica': ['building', 'Provisioning', 1],
    'replica ready, recent traffic': ['up', 'ReplicaReady', 1],
    'replica ready, idle past timeout': ['hibernated', 'IdleTimeout', 0],
    'idle past timeout but requests in flight': ['up', 'ReplicaReady', 1],
    'wake requested': ['building', 'Provisioning', 1],
    'image pull failing': ['failed', 'ImagePullFailed', 0],
    'container crash-looping': ['failed', 'CrashLoop', 0],
    'container OOM-killed': ['failed', 'ModelTooLarge', 0],
    'engine refused by a gated repo': ['failed', 'GatedModelNoToken', 0],
    unschedulable: ['building', 'Unschedulable', 1],
    'deadlines passed, nothing ready': ['building', 'Provisioning', 1], // the build clock starts when readiness is lost
    'preflight: gated model, no token': ['failed', 'GatedModelNoToken', 0],
    'preflight: hub unreachable': ['building', 'Provisioning', 1],
    'hardware not in catalog': ['failed', 'UnknownInstanceType', 0],
    'new generation, checks passed': ['building', 'Provisioning', 1],
  },
  hibernated: {
    'no ready replica': ['hibernated', 'IdleTimeout', 0],
    'replica ready, recent traffic': ['hibernated', 'IdleTimeout', 0],
    'replica ready, idle past timeout': ['hibernated', 'IdleTimeout', 0],
    'idle past timeout but requests in flight': ['hibernated', 'IdleTimeout', 0],
    'wake requested': ['waking', 'WakeRequested', 1],
    'image pull failing': ['hibernated', 'IdleTimeout', 0],
    'container crash-looping': ['hibernated', 'IdleTimeout', 0],
    'container OOM-killed': ['hibernated', 'IdleTimeout', 0],
    'engine refused by a gated repo': ['hibernated', 'IdleTimeout', 0],
    unschedulable: ['hibernated', 'IdleTimeout', 0],
    'deadlines passed, nothing ready': ['hibernated', 'IdleTimeout', 0],
    'preflight: gated model, no token': ['failed', 'GatedModelNoToken', 0],
    'preflight: hub unreachable': ['hibernated', 'IdleTimeout', 0],
    'hardware not in catalog': ['failed', 'UnknownInstanceType', 0],
    'new generation, checks passed': ['hibernated', 'IdleTimeout', 0],
  },
  waking: {
    'no ready replica': ['waking', 'WakeRequested', 1],
    'replica ready, recent traffic': ['up', 'ReplicaReady', 1],
    'replica ready, idle past timeout': ['up', 'ReplicaReady', 1],
    'idle past timeout but requests in flight': ['up', 'ReplicaReady', 1],
    'wake requested': ['waking', 'WakeRequested', 1],
    'image pull failing': ['failed', 'ImagePullFailed', 0],
    'container crash-looping': ['failed', 'CrashLoop', 0],
    'container OOM-killed': ['failed', 'ModelTooLarge', 0],
    'engine refused by a gated repo': ['failed', 'GatedModelNoToken', 0],
    unschedulable: ['waking', 'WakeRequested', 1],
    'deadlines passed, nothing ready': ['failed', 'WakeTimeout', 0],
    'preflight: gated model, no token': ['failed', 'GatedModelNoToken', 0],
    'preflight: hub unreachable': ['waking', 'WakeRequested', 1],
    'hardware not in catalog': ['failed', 'UnknownInstanceType', 0],
    'new generation, checks passed': ['waking', 'WakeRequested', 1],
  },
  failed: {
    'no ready replica': ['failed', 'CrashLoop', 0],
    'replica ready, recent traffic': ['failed', 'CrashLoop', 0],
    'replica ready, idle past timeout': ['failed', 'CrashLoop', 0],
    'idle past timeout but requests in flight': ['failed', 'CrashLoop', 0],
    'wake requested': ['failed', 'CrashLoop', 0],
    'image pull failing': ['failed', 'CrashLoop', 0],
    'container crash-looping': ['failed', 'CrashLoop', 0],
    'container OOM-killed': ['failed', 'CrashLoop', 0],
    'engine refused by a gated repo': ['failed', 'CrashLoop', 0],
    unschedulable: ['failed', 'CrashLoop', 0],
    'deadlines passed, nothing ready': ['failed', 'CrashLoop', 0],
    'preflight: gated model, no token': ['failed', 'CrashLoop', 0],
    'preflight: hub unreachable': ['failed', 'CrashLoop', 0],
    'hardware not in catalog': ['failed', 'CrashLoop', 0],
    'new generation, checks passed': ['building', 'Provisioning', 1],
  },
};

describe('phase machine transition table', () => {
  it('covers every phase and every observation', () => {
    expect(Object.keys(TABLE).sort()).toEqual([...PHASES].sort());
    for (const row of Object.values(TABLE))
      expect(Object.keys(row).sort()).toEqual(Object.keys(OBSERVATIONS).sort());
  });

  for (const phase of PHASES) {
    for (const [name, c] of Object.entries(OBSERVATIONS)) {
      const [wantPhase, wantReason, wantReplicas] = TABLE[phase][name]!;
      it(`${phase} + ${name} → ${wantPhase} (${wantReason}), ${wantReplicas} replicas`, () => {
        const now = new Date(T0.getTime() + (c.advanceSeconds ?? 0) * 1000);
        const d = decide(endpoint(STATES[phase], c.generation ?? 1, c.annotations), c.observed, now, opts);
        expect([d.phase, d.reason, d.desiredReplicas]).toEqual([wantPhase, wantReason, wantReplicas]);
        // Every transition emits an event; staying put emits none.
        const transitioned = wantPhase !== phase || wantReason !== STATES[phase].reason;
        expect(d.events.some((e) => e.reason === wantReason)).toBe(transitioned);
        if (wantPhase === 'failed' && transitioned) expect(d.events.at(-1)?.type).toBe('Warning');
        // Conditions mirror the phase.
        const status = (type: string) => d.conditions.find((x) => x.type === type)?.status;
        expect(status('Ready')).toBe(wantPhase === 'up' || wantPhase === 'hibernated' ? 'True' : 'False');
        expect(status('Reconciling')).toBe(
          wantPhase === 'building' || wantPhase === 'waking' ? 'True' : 'False',
        );
        expect(status('Stalled')).toBe(wantPhase === 'failed' ? 'True' : 'False');
        if (wantPhase === 'failed')
          expect(d.conditions.find((x) => x.type === 'Stalled')?.reason).toBe(wantReason);
        expect(d.conditions.find((x) => x.type === 'Failed')?.status).toBe(
          wantPhase === 'failed' ? 'True' : 'False',
        );
      });
    }
  }
});

describe('phase machine memory', () => {
  it('runs no GPUs until the model checks pass', () => {
    const d = decide(endpoint({}), { hardware: ok, workload: wl(0) }, T0, opts);
    expect([d.phase, d.reason, d.desiredReplicas]).toEqual(['building', 'CheckingModel', 0]);
    expect(d.memory.buildingSince).toBe(T0.toISOString());
    const passed = decide(
      endpoint(d.memory),
      { hardware: ok, workload: wl(0), preflight: { kind: 'passed' } },
      T0,
      opts,
    );
    expect([passed.phase, passed.desiredReplicas, passed.memory.preflightGeneration]).toEqual([
      'building',
      1,
      1,
    ]);
  });

  it('a wake request that predates the hibernation does not wake it again', () => {
    const annotations = { [ANNOTATION_WAKE_REQUESTED]: ago(5000), [ANNOTATION_LAST_ACTIVITY]: ago(1000) };
    const hib = decide(endpoint(STATES.up, 1, annotations), { hardware: ok, workload: wl(1) }, T0, opts);
    expect(hib.phase).toBe('hibernated');
    expect(hib.memory.wakeRequestSeen).toBe(ago(5000));
    const again = decide(
      endpoint({ ...hib.memory, phase: 'hibernated', reason: 'IdleTimeout' }, 1, annotations),
      { hardware: ok, workload: wl(0) },
      T0,
      opts,
    );
    expect(again.phase).toBe('hibernated');
    const woken = decide(
      endpoint({ ...hib.memory, phase: 'hibernated' }, 1, {
        ...annotations,
        [ANNOTATION_WAKE_REQUESTED]: T0.toISOString(),
      }),
      { hardware: ok, workload: wl(0) },
      T0,
      opts,
    );
    expect([woken.phase, woken.memory.wakeStartedAt, woken.memory.hibernatedAt]).toEqual([
      'waking',
      T0.toISOString(),
      undefined,
    ]);
  });

  it('a wake does not end in the pass that starts it, even when a replica of the hibernation still looks Ready', () => {
    const hibernated = endpoint(
      { phase: 'hibernated', reason: 'IdleTimeout', hibernatedAt: ago(1), preflightGeneration: 1 },
      1,
      { [ANNOTATION_WAKE_REQUESTED]: T0.toISOString() },
    );
    const first = decide(hibernated, { hardware: ok, workload: wl(1) }, T0, opts);
    expect([first.phase, first.desiredReplicas, first.memory.wakeStartedAt]).toEqual([
      'waking',
      1,
      T0.toISOString(),
    ]);
    expect(first.requeueAfterMs).toBe(1_000);
    expect(first.wakeDurationSeconds).toBeUndefined();
    // The next pass, after the count was written and the status with the wake: a Ready replica ends it.
    const later = new Date(T0.getTime() + 2_000);
    const next = decide(
      endpoint({ ...first.memory, phase: 'waking', reason: 'WakeRequested' }, 1, {
        [ANNOTATION_WAKE_REQUESTED]: T0.toISOString(),
      }),
      { hardware: ok, workload: wl(1) },
      later,
      opts,
    );
    expect([next.phase, next.wakeDurationSeconds]).toEqual(['up', 2]);
  });

  it('reports the wake duration when the wake completes', () => {
    const d = decide(endpoint(STATES.waking), { hardware: ok, workload: wl(1) }, T0, opts);
    expect(d.wakeDurationSeconds).toBe(30);
    expect(d.memory.wakeStartedAt).toBeUndefined();
    expect(d.memory.upSince).toBe(T0.toISOString());
  });

  it('requeues at the idle deadline while up', () => {
    const d = decide(
      endpoint(STATES.up, 1, { [ANNOTATION_LAST_ACTIVITY]: ago(100) }),
      { hardware: ok, workload: wl(1) },
      T0,
      opts,
    );
    expect(d.requeueAfterMs).toBe(800_000);
  });

  it('never hibernates with minReplicas > 0, and wakes a hibernated endpoint whose minimum was raised', () => {
    const e = endpoint(STATES.up, 1, { [ANNOTATION_LAST_ACTIVITY]: ago(100_000) });
    e.spec.scaling.minReplicas = 2;
    e.spec.scaling.maxReplicas = 3;
    expect(decide(e, { hardware: ok, workload: wl(2) }, T0, opts)).toMatchObject({
      phase: 'up',
      desiredReplicas: 2,
    });
    const h = endpoint(STATES.hibernated);
    h.spec.scaling.minReplicas = 1;
    expect(decide(h, { hardware: ok, workload: wl(0) }, T0, opts)).toMatchObject({
      phase: 'waking',
      desiredReplicas: 1,
    });
  });
});

describe('replicasForLoad', () => {
  const p = { targetInFlightPerReplica: 8 };
  it('stays within [max(1,min), max]', () => {
    expect(replicasForLoad(undefined, 0, 4, p)).toBe(1);
    expect(replicasForLoad(0, 2, 4, p)).toBe(2);
    expect(replicasForLoad(17, 0, 4, p)).toBe(3);
    expect(replicasForLoad(1000, 0, 4, p)).toBe(4);
  });
});

describe('reportedInFlight', () => {
  it('reads the API-reported load only while the activity annotation is fresh', async () => {
    const { reportedInFlight } = await import('../src/core/reconcile.ts');
    const e = (inFlight: string, lastActivity: string) =>
      endpoint({}, 1, { 'berth.dev/in-flight': inFlight, [ANNOTATION_LAST_ACTIVITY]: lastActivity });
    expect(reportedInFlight(e('40', ago(5)), T0)).toBe(40);
    expect(reportedInFlight(e('40', ago(60)), T0)).toBeUndefined();
    expect(reportedInFlight(e('x', ago(5)), T0)).toBeUndefined();
  });
});
