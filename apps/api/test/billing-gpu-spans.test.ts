// Replica spans replayed into a meter: the pure half of the GPU meter's sync. The meter steps of
// gpu-time.ts apply them, so each case checks the intervals a user is invoiced for, and that a
// replay after a restart, a missed event or a second API replica adds nothing.
import { describe, expect, it } from 'vitest';
import { replay, replicasAt, type ReplicaSpan } from '../src/billing/gpu-spans.ts';
import { meterStep, type ClosedInterval, type GpuShape, type MeterState } from '../src/billing/gpu-time.ts';

const t = (hhmm: string) => new Date(`2026-11-23T${hhmm}:00.000Z`);
const shape: GpuShape = {
  accountId: 'acct_a',
  instanceType: 'nvidia-l4-24gb',
  gpuType: 'NVIDIA L4 24GB',
  gpusPerReplica: 1,
  ratePerGpuHour: 800_000n,
};

/** Applies a replay to a meter as the repository does; returns the meter and what it closed. */
function run(meter: MeterState | null, spans: ReplicaSpan[], now: Date) {
  const closed: ClosedInterval[] = [];
  for (const s of replay(meter, spans, now)) {
    const step = meterStep(meter, { ...shape, replicas: s.replicas, at: s.at }, null);
    if (step.close) closed.push(step.close);
    if (step.next) meter = step.next;
  }
  return { meter, closed };
}
const brief = (closed: ClosedInterval[]) =>
  closed.map(
    (c) =>
      `${c.replicas}×${c.startedAt.toISOString().slice(11, 16)}-${c.endedAt.toISOString().slice(11, 16)}`,
  );

describe('replicasAt', () => {
  it('counts spans that started at or before the instant and end after it', () => {
    const spans = [{ start: t('10:00'), end: t('11:00') }, { start: t('10:30') }];
    expect(replicasAt(spans, t('09:59'))).toBe(0);
    expect(replicasAt(spans, t('10:00'))).toBe(1);
    expect(replicasAt(spans, t('10:30'))).toBe(2);
    expect(replicasAt(spans, t('11:00'))).toBe(1);
  });
});

describe('replay', () => {
  it('an endpoint that never ran and has no meter: nothing to write', () => {
    expect(replay(null, [], t('12:00'))).toEqual([]);
  });

  it('a first sync replays every change since the first replica was scheduled', () => {
    const spans = [
      { start: t('10:00'), end: t('12:00') },
      { start: t('11:00'), end: t('11:30') },
    ];
    expect(replay(null, spans, t('13:00'))).toEqual([
      { replicas: 1, at: t('10:00') },
      { replicas: 2, at: t('11:00') },
      { replicas: 1, at: t('11:30') },
      { replicas: 0, at: t('12:00') },
      { replicas: 0, at: t('13:00') },
    ]);
    expect(brief(run(null, spans, t('13:00')).closed)).toEqual([
      '1×10:00-11:00',
      '2×11:00-11:30',
      '1×11:30-12:00',
    ]);
  });

  it('replaying the same spans again, later, or from a second replica closes nothing twice', () => {
    const spans = [{ start: t('10:00'), end: t('12:00') }, { start: t('12:30') }];
    const first = run(null, spans, t('13:00'));
    expect(brief(first.closed)).toEqual(['1×10:00-12:00']);
    const again = run(first.meter, spans, t('13:00'));
    expect(again.closed).toEqual([]);
    const later = run(first.meter, spans, t('14:00'));
    expect(later.closed).toEqual([]);
    expect(later.meter).toMatchObject({ replicas: 1, openedAt: t('12:30'), lastObservedAt: t('14:00') });
  });

  it('changes the meter missed while the API was down are replayed at the times the spans say', () => {
    const before = run(null, [{ start: t('10:00') }], t('10:30')).meter!;
    // Down from 10:30 to 13:00: the replica ended at 11:00 (its end is known), another ran 12:00–.
    const spans = [{ start: t('10:00'), end: t('11:00') }, { start: t('12:00') }];
    const after = run(before, spans, t('13:00'));
    expect(brief(after.closed)).toEqual(['1×10:00-11:00']);
    expect(after.meter).toMatchObject({ replicas: 1, openedAt: t('12:00'), lastObservedAt: t('13:00') });
  });

  it('a replica gone while nobody watched, its end unknown, is closed at the last observation', () => {
    const before = run(null, [{ start: t('10:00') }], t('10:30')).meter!;
    expect(replay(before, [], t('13:00'))).toEqual([
      { replicas: 0, at: t('10:30') },
      { replicas: 0, at: t('13:00') },
    ]);
    expect(brief(run(before, [], t('13:00')).closed)).toEqual(['1×10:00-10:30']);
  });

  it('changes before the last observation are already counted: only later ones are replayed', () => {
    const before = run(null, [{ start: t('10:00') }], t('11:00')).meter!;
    const spans = [{ start: t('10:00'), end: t('11:30') }, { start: t('10:15') }];
    // The replica scheduled at 10:15 was missed; the meter learns of it from 11:00, its last observation.
    expect(replay(before, spans, t('12:00'))).toEqual([
      { replicas: 2, at: t('11:00') },
      { replicas: 1, at: t('11:30') },
      { replicas: 1, at: t('12:00') },
    ]);
  });

  it('a replica replacing another at the same instant is no change', () => {
    const spans = [{ start: t('10:00'), end: t('11:00') }, { start: t('11:00') }];
    expect(replay(null, spans, t('12:00'))).toEqual([
      { replicas: 1, at: t('10:00') },
      { replicas: 1, at: t('12:00') },
    ]);
  });

  it('replicas the meter counted keep counting when their start, learnt later, is after its last observation', () => {
    const before = run(null, [{ start: t('10:00') }], t('11:00')).meter!;
    // After a restart the running replica's start comes from another clock: 11:05, after 11:00.
    const spans = [{ start: t('11:05') }, { start: t('11:30') }];
    expect(replay(before, spans, t('12:00'))).toEqual([
      { replicas: 2, at: t('11:30') },
      { replicas: 2, at: t('12:00') },
    ]);
    expect(brief(run(before, spans, t('12:00')).closed)).toEqual(['1×10:00-11:30']);
  });

  it('a clock behind the meter (another replica ahead) replays nothing', () => {
    const before = run(null, [{ start: t('10:00') }], t('11:00')).meter!;
    expect(replay(before, [], t('10:59'))).toEqual([]);
  });
});
