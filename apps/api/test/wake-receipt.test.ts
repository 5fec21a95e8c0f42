// Where a wake is, and how long an endpoint's wakes take: the stage a held stream's comments, the
// dashboard and the CLI name, the receipt GET /api/endpoints/{id} shows, and the Retry-After of a 503
// from the p95 of the endpoint's recent wakes.
import { ANNOTATION_WAKE_REQUESTED, type DedicatedEndpoint } from '@berth/crds';
import { describe, expect, it } from 'vitest';
import { viewWake, wakeProgress } from '../src/dedicated/wake-receipt.ts';
import { wakeTimes } from '../src/dedicated/upstream/wake-times.ts';
import { endpointObject } from './support/endpoint.ts';

const T = Date.parse('2026-11-26T10:00:00.000Z');
const at = (ms: number) => new Date(T + ms).toISOString();

const endpoint = (
  status: DedicatedEndpoint['status'],
  annotations: Record<string, string> = {},
  id = 'endpt-a',
) => endpointObject(id, status, { annotations });

describe('wakeProgress', () => {
  it('names the stage the wake waits for, from the signal to the engine', () => {
    const requested = { [ANNOTATION_WAKE_REQUESTED]: at(0) };
    // Asked, not yet acted on by the operator.
    expect(wakeProgress(endpoint({ phase: 'hibernated', hibernatedAt: at(-60_000) }, requested))).toEqual({
      stage: 'signal',
      startedAt: T,
    });
    const receipt = { requestedAt: at(0), scaledAt: at(40) };
    const waking = (extra: Record<string, string>) =>
      wakeProgress(
        endpoint({ phase: 'waking', wakeStartedAt: at(40), lastWake: { ...receipt, ...extra } }, requested),
      );
    expect(waking({})).toEqual({ stage: 'scheduled', startedAt: T });
    expect(waking({ scheduledAt: at(300) })?.stage).toBe('image');
    expect(waking({ scheduledAt: at(300), imageReadyAt: at(1300) })?.stage).toBe('engine');
    expect(waking({ scheduledAt: at(300), imageReadyAt: at(1300), engineReadyAt: at(9000) })?.stage).toBe(
      'ready',
    );
  });

  it('is nothing for an endpoint that is up, or asleep and not asked to wake (an old request)', () => {
    expect(wakeProgress(endpoint({ phase: 'up' }))).toBeUndefined();
    const old = { [ANNOTATION_WAKE_REQUESTED]: at(-120_000) };
    expect(wakeProgress(endpoint({ phase: 'hibernated', hibernatedAt: at(-60_000) }, old))).toBeUndefined();
  });

  it("does not take the previous wake's receipt for this one's", () => {
    const previous = { requestedAt: at(-900_000), scaledAt: at(-899_950), engineReadyAt: at(-890_000) };
    expect(
      wakeProgress(endpoint({ phase: 'waking', wakeStartedAt: at(40), lastWake: previous })),
    ).toMatchObject({ stage: 'signal', startedAt: T + 40 });
  });
});

describe('viewWake', () => {
  it('shows a finished wake stage by stage, with its node and placement', () => {
    const lastWake = {
      requestedAt: at(0),
      scaledAt: at(40),
      scheduledAt: at(300),
      imageReadyAt: at(1300),
      engineReadyAt: at(9000),
      firstByteAt: at(9030),
      node: 'gpu-h100-0',
      placement: 'warm' as const,
    };
    expect(viewWake(endpoint({ phase: 'up', lastWake }), T + 60_000)).toEqual({
      inProgress: false,
      stage: 'done',
      startedAt: at(0),
      elapsedSeconds: 9.03,
      ...lastWake,
      seconds: { signal: 0.04, scheduled: 0.26, image: 1, engine: 7.7, firstByte: 0.03, total: 9.03 },
    });
  });

  it('shows a wake in progress with its elapsed time and the stages reached so far', () => {
    const e = endpoint(
      { phase: 'waking', wakeStartedAt: at(40), lastWake: { requestedAt: at(0), scaledAt: at(40) } },
      { [ANNOTATION_WAKE_REQUESTED]: at(0) },
    );
    expect(viewWake(e, T + 5_500)).toMatchObject({
      inProgress: true,
      stage: 'scheduled',
      elapsedSeconds: 5.5,
      scheduledAt: null,
      placement: null,
      seconds: { signal: 0.04, scheduled: null, total: null },
    });
  });

  it('is null for an endpoint that never slept', () => {
    expect(viewWake(endpoint({ phase: 'up' }), T)).toBeNull();
  });
});

describe('wakeTimes', () => {
  it('the p95 of the recent wakes, each counted once, the receipt in status among them', () => {
    const times = wakeTimes(30);
    const e = endpoint({ phase: 'up' });
    expect(times.p95(e)).toBeUndefined();
    for (let i = 1; i <= 20; i++) times.observe('endpt-a', `w${i}`, i);
    times.observe('endpt-a', 'w20', 99); // the same wake again: not counted twice
    expect(times.p95(e)).toBe(19);
    // A wake another API replica saw, from its receipt: 40 s. The oldest sample (1 s) drops out.
    const seen = endpoint({
      phase: 'up',
      lastWake: { requestedAt: at(0), scaledAt: at(50), engineReadyAt: at(40_000) },
    });
    expect(times.p95(seen)).toBe(20);
    times.observe('endpt-a', at(0), 40); // this process's own view of that same wake
    expect(times.p95(seen)).toBe(20);
    expect(times.p95(endpoint({ phase: 'up' }, {}, 'endpt-b'))).toBeUndefined();
  });

  it('Retry-After: what is left of the p95 since the signal, at least a tenth of it, at least 1 s', () => {
    const times = wakeTimes(30);
    const asleep = endpoint({ phase: 'hibernated', hibernatedAt: at(-60_000) });
    expect(times.retryAfter(asleep, T)).toBe(30);
    const waking = endpoint(
      { phase: 'waking', wakeStartedAt: at(40) },
      { [ANNOTATION_WAKE_REQUESTED]: at(0) },
    );
    expect(times.retryAfter(waking, T + 12_000)).toBe(18);
    times.observe('endpt-a', 'x', 100);
    expect(times.retryAfter(waking, T + 12_000)).toBe(88);
    expect(times.retryAfter(waking, T + 99_500)).toBe(10);
    const quick = wakeTimes(30);
    quick.observe('endpt-a', 'y', 0.2);
    expect(quick.retryAfter(waking, T + 5_000)).toBe(1);
  });
});
