import { describe, expect, it } from 'vitest';
import { preferredNodes, wakeReceipt, wakeStages, warmNodes } from '../src/core/placement.ts';
import { warmPlacement } from '../src/k8s/builders.ts';
import type { Decision } from '../src/core/types.ts';

const decision = (memory: Decision['memory'], extra: Partial<Decision> = {}): Decision => ({
  phase: 'waking',
  reason: 'Waking',
  message: '',
  desiredReplicas: 1,
  memory,
  events: [],
  conditions: [],
  ...extra,
});

describe('warm nodes', () => {
  it('newest first, each node once (its latest readiness), at most four', () => {
    const known = [
      { name: 'a', readyAt: '2026-11-26T10:00:00.000Z' },
      { name: 'b', readyAt: '2026-11-26T09:00:00.000Z' },
    ];
    const seen = [
      { name: 'b', readyAt: '2026-11-26T11:00:00.000Z' },
      { name: 'c', readyAt: '2026-11-26T08:00:00.000Z' },
      { name: 'd', readyAt: '2026-11-26T07:00:00.000Z' },
      { name: 'e', readyAt: '2026-11-26T06:00:00.000Z' },
    ];
    expect(warmNodes(seen, known)).toEqual([
      { name: 'b', readyAt: '2026-11-26T11:00:00.000Z' },
      { name: 'a', readyAt: '2026-11-26T10:00:00.000Z' },
      { name: 'c', readyAt: '2026-11-26T08:00:00.000Z' },
      { name: 'd', readyAt: '2026-11-26T07:00:00.000Z' },
    ]);
    expect(warmNodes(undefined, undefined)).toBeUndefined();
  });

  it('the preference is fixed while hibernated and kept while replicas run (no rollout)', () => {
    const warm = [{ name: 'a', readyAt: '2026-11-26T10:00:00.000Z' }];
    expect(preferredNodes('hibernated', warm, ['old'])).toEqual(['a']);
    expect(preferredNodes('up', [{ name: 'z', readyAt: '2026-11-26T12:00:00.000Z' }], ['a'])).toEqual(['a']);
    expect(preferredNodes('waking', warm, undefined)).toBeUndefined();
  });

  it('the pod template prefers them by recency, never requires them', () => {
    expect(warmPlacement(undefined)).toEqual({});
    const p = warmPlacement(['a', 'b']);
    expect(p.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution).toBeUndefined();
    expect(p.affinity?.nodeAffinity?.preferredDuringSchedulingIgnoredDuringExecution).toEqual([
      { weight: 100, preference: { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['a'] }] } },
      { weight: 75, preference: { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['b'] }] } },
    ]);
  });
});

describe('the wake receipt', () => {
  const scaledAt = '2026-11-26T10:00:00.000Z';
  const requestedAt = '2026-11-26T09:59:59.950Z';
  const pod = {
    pod: 'endpt-x-1',
    node: 'a',
    createdAt: '2026-11-26T10:00:00.100Z',
    scheduledAt: '2026-11-26T10:00:00.300Z',
    runningAt: '2026-11-26T10:00:01.300Z',
    readyAt: '2026-11-26T10:00:05.300Z',
  };

  it('follows the woken replica stage by stage, and says the placement was warm', () => {
    const r = wakeReceipt(
      { preferredNodes: ['a'], wakeStartedAt: scaledAt },
      decision({ wakeStartedAt: scaledAt, wakeRequestSeen: requestedAt }),
      [{ ...pod, pod: 'older', createdAt: '2026-11-26T09:00:00.000Z', node: 'b' }, pod],
    );
    expect(r).toEqual({
      requestedAt,
      scaledAt,
      pod: 'endpt-x-1',
      node: 'a',
      placement: 'warm',
      scheduledAt: pod.scheduledAt,
      imageReadyAt: pod.runningAt,
      engineReadyAt: pod.readyAt,
    });
    expect(wakeStages(r!)).toEqual({ signal: 0.05, scheduled: 0.3, image: 1, engine: 4, total: 5.35 });
  });

  it('cold on a node the endpoint did not run on; completed on the pass the wake ends, then kept', () => {
    const done = wakeReceipt(
      { preferredNodes: ['b'], wakeStartedAt: scaledAt },
      decision({ wakeRequestSeen: requestedAt }, { phase: 'up', wakeDurationSeconds: 5 }),
      [pod],
    );
    expect(done).toMatchObject({ placement: 'cold', node: 'a', engineReadyAt: pod.readyAt });
    expect(wakeReceipt({ lastWake: done }, decision({}, { phase: 'up' }), [])).toBe(done);
  });

  it('completed on a later pass when the pass that ends the wake has not seen the pod Ready yet', () => {
    const early = wakeReceipt(
      { preferredNodes: ['a'], wakeStartedAt: scaledAt, wakeRequestSeen: requestedAt },
      decision({}, { phase: 'up', wakeDurationSeconds: 5 }),
      [{ ...pod, readyAt: undefined }],
    );
    expect(early).toMatchObject({ scaledAt, requestedAt, node: 'a' });
    expect(early?.engineReadyAt).toBeUndefined();
    const later = wakeReceipt({ preferredNodes: ['a'], lastWake: early }, decision({}, { phase: 'up' }), [
      pod,
    ]);
    expect(later).toEqual({ ...early, engineReadyAt: pod.readyAt });
    // Not once the endpoint has gone back to sleep.
    expect(
      wakeReceipt({ lastWake: early }, decision({}, { phase: 'hibernated', desiredReplicas: 0 }), [pod]),
    ).toBe(early);
  });

  it("takes the first byte from the API's annotation once the engine is Ready, never one older than the wake", () => {
    const waking = wakeReceipt(
      { wakeStartedAt: scaledAt },
      decision({ wakeStartedAt: scaledAt, wakeRequestSeen: requestedAt }),
      [{ ...pod, readyAt: undefined }],
      '2026-11-26T10:00:05.400Z',
    );
    expect(waking?.firstByteAt).toBeUndefined();
    const done = wakeReceipt(
      { wakeStartedAt: scaledAt },
      decision({ wakeRequestSeen: requestedAt }, { phase: 'up', wakeDurationSeconds: 5 }),
      [pod],
    );
    // An annotation from the wake before this one is not this wake's first byte.
    expect(
      wakeReceipt({ lastWake: done }, decision({}, { phase: 'up' }), [], '2026-11-26T09:59:00.000Z'),
    ).toBe(done);
    const firstByte = '2026-11-26T10:00:05.342Z';
    const withByte = wakeReceipt({ lastWake: done }, decision({}, { phase: 'up' }), [], firstByte);
    expect(withByte).toEqual({ ...done, firstByteAt: firstByte });
    // Kept as it is afterwards: a later annotation does not move it.
    expect(
      wakeReceipt({ lastWake: withByte }, decision({}, { phase: 'up' }), [], '2026-11-26T10:09:00.000Z'),
    ).toBe(withByte);
  });
});
