import { describe, expect, it } from 'vitest';
import {
  invoiceLines,
  meterStep,
  terminateStep,
  weekStart,
  type GpuShape,
  type MeterState,
} from '../src/billing/gpu-time.ts';

const t = (iso: string) => new Date(iso);
const shape: GpuShape = {
  accountId: 'acct_a',
  instanceType: 'nvidia-l4-24gb',
  gpuType: 'NVIDIA L4 24GB',
  gpusPerReplica: 2,
  ratePerGpuHour: 800_000n,
};
const meter = (m: Partial<MeterState>): MeterState => ({
  ...shape,
  replicas: 1,
  openedAt: t('2026-11-23T10:00:00Z'),
  lastObservedAt: t('2026-11-23T10:30:00Z'),
  terminatedAt: null,
  ...m,
});

describe('weekStart: Monday 00:00 UTC on or before', () => {
  it.each([
    ['2026-11-23T00:00:00.000Z', '2026-11-23T00:00:00.000Z'], // a Monday, at midnight
    ['2026-11-23T00:00:00.001Z', '2026-11-23T00:00:00.000Z'],
    ['2026-11-29T23:59:59.999Z', '2026-11-23T00:00:00.000Z'], // Sunday night
    ['2026-11-30T00:00:00.000Z', '2026-11-30T00:00:00.000Z'],
    ['2027-01-01T12:00:00.000Z', '2026-12-28T00:00:00.000Z'], // across a year
    ['1970-01-01T00:00:00.000Z', '1969-12-29T00:00:00.000Z'], // a Thursday
  ])('%s → %s', (at, monday) => {
    expect(weekStart(t(at)).toISOString()).toBe(monday);
  });
});

describe('meterStep: level-triggered observations', () => {
  const at = t('2026-11-23T11:00:00Z');

  it('the first observation of a running endpoint opens an interval at its time', () => {
    const step = meterStep(null, { ...shape, replicas: 2, at }, null);
    expect(step.close).toBeUndefined();
    expect(step.next).toMatchObject({ replicas: 2, openedAt: at, lastObservedAt: at });
  });

  it('the same state again only moves lastObservedAt (replays are harmless)', () => {
    const step = meterStep(meter({}), { ...shape, replicas: 1, at }, null);
    expect(step.close).toBeUndefined();
    expect(step.next).toMatchObject({ openedAt: t('2026-11-23T10:00:00Z'), lastObservedAt: at });
  });

  it('a change closes the open interval and opens the next at the change time', () => {
    const step = meterStep(meter({}), { ...shape, replicas: 3, at }, null);
    expect(step.close).toMatchObject({ replicas: 1, startedAt: t('2026-11-23T10:00:00Z'), endedAt: at });
    expect(step.next).toMatchObject({ replicas: 3, openedAt: at });
  });

  it('scaling to zero (hibernation) closes it and opens nothing', () => {
    const step = meterStep(meter({}), { ...shape, replicas: 0, at }, null);
    expect(step.close?.endedAt).toEqual(at);
    expect(step.next).toMatchObject({ replicas: 0, openedAt: null });
  });

  it('uses `since` when the runtime knows when the state began, kept after the last observation', () => {
    const since = t('2026-11-23T10:45:00Z');
    expect(meterStep(meter({}), { ...shape, replicas: 0, at, since }, null).close?.endedAt).toEqual(since);
    // Before the last observation (10:30) it cannot be: we saw the old state then.
    const early = t('2026-11-23T10:10:00Z');
    expect(meterStep(meter({}), { ...shape, replicas: 0, at, since: early }, null).close?.endedAt).toEqual(
      t('2026-11-23T10:30:00Z'),
    );
    expect(
      meterStep(meter({}), { ...shape, replicas: 0, at, since: 'lastObserved' }, null).close?.endedAt,
    ).toEqual(t('2026-11-23T10:30:00Z'));
  });

  it('a new rate (a price change) closes the interval at the old rate', () => {
    const step = meterStep(meter({}), { ...shape, ratePerGpuHour: 900_000n, replicas: 1, at }, null);
    expect(step.close).toMatchObject({ ratePerGpuHour: 800_000n, endedAt: at });
    expect(step.next).toMatchObject({ ratePerGpuHour: 900_000n, openedAt: at });
  });

  it('ignores observations older than the last one, and anything after termination', () => {
    expect(meterStep(meter({}), { ...shape, replicas: 0, at: t('2026-11-23T10:20:00Z') }, null)).toEqual({
      next: null,
    });
    const done = meter({ replicas: 0, openedAt: null, terminatedAt: t('2026-11-23T10:30:00Z') });
    expect(meterStep(done, { ...shape, replicas: 1, at }, null)).toEqual({ next: null });
  });

  it('never reaches into invoiced time (the floor)', () => {
    const floor = t('2026-11-23T10:50:00Z');
    const step = meterStep(meter({}), { ...shape, replicas: 0, at, since: t('2026-11-23T10:40:00Z') }, floor);
    expect(step.close?.endedAt).toEqual(floor);
  });

  it('termination closes the open interval for good', () => {
    const step = terminateStep(meter({}), at, null);
    expect(step.close).toMatchObject({ startedAt: t('2026-11-23T10:00:00Z'), endedAt: at, replicas: 1 });
    expect(step.next).toMatchObject({ replicas: 0, openedAt: null, terminatedAt: at });
    expect(terminateStep(step.next, t('2026-11-23T12:00:00Z'), null)).toEqual({ next: null });
    expect(terminateStep(null, at, null)).toEqual({ next: null });
  });
});

describe('invoiceLines', () => {
  const week = [t('2026-11-23T00:00:00Z'), t('2026-11-30T00:00:00Z')] as const;
  const interval = (
    from: string,
    to: string,
    extra: Partial<GpuShape & { replicas: number; endpointId: string }> = {},
  ) => ({
    ...shape,
    endpointId: 'endpt-a',
    replicas: 1,
    startedAt: t(from),
    endedAt: t(to),
    ...extra,
  });

  it('counts only the part inside the period, in replicas × GPUs × time', () => {
    const lines = invoiceLines(
      [
        interval('2026-11-22T23:00:00Z', '2026-11-23T01:00:00Z'), // 1 h inside
        interval('2026-11-29T23:30:00Z', '2026-11-30T00:30:00Z', { replicas: 2 }), // 30 min inside, 2 replicas
        interval('2026-11-30T01:00:00Z', '2026-11-30T02:00:00Z'), // outside
      ],
      ...week,
    );
    // (1 h × 1 + 0.5 h × 2) × 2 GPUs = 4 GPU-hours at 0.80 = 3.20
    expect(lines).toEqual([
      {
        endpointId: 'endpt-a',
        instanceType: 'nvidia-l4-24gb',
        gpuType: 'NVIDIA L4 24GB',
        gpusPerReplica: 2,
        gpuMs: 4n * 3_600_000n,
        ratePerGpuHour: 800_000n,
        amount: 3_200_000n,
      },
    ]);
  });

  it('one line per endpoint, and per GPU count and rate within it', () => {
    const lines = invoiceLines(
      [
        interval('2026-11-24T00:00:00Z', '2026-11-24T01:00:00Z'),
        interval('2026-11-24T01:00:00Z', '2026-11-24T02:00:00Z', { ratePerGpuHour: 1_000_000n }),
        interval('2026-11-24T00:00:00Z', '2026-11-24T01:00:00Z', { endpointId: 'endpt-b' }),
      ],
      ...week,
    );
    expect(lines.map((l) => [l.endpointId, l.ratePerGpuHour, l.amount])).toEqual([
      ['endpt-a', 800_000n, 1_600_000n],
      ['endpt-a', 1_000_000n, 2_000_000n],
      ['endpt-b', 800_000n, 1_600_000n],
    ]);
  });

  it('nothing in the period, no lines', () => {
    expect(invoiceLines([interval('2026-11-30T01:00:00Z', '2026-11-30T02:00:00Z')], ...week)).toEqual([]);
  });
});
