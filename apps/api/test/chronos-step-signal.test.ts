// A Chronos step's signal (src/chronos/execute.ts stepSignal): aborted by the executor's stop or by
// the step's wall clock, and leaving nothing behind once the step ends — no timer, no listener on the
// executor's long-lived stop signal (AbortSignal.any over AbortSignal.timeout kept both per step).
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { stepSignal } from '../src/chronos/execute.ts';

const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

describe('a Chronos step signal', () => {
  it('aborts with the executor’s stop, and with its own wall clock', async () => {
    const stop = new AbortController();
    const a = stepSignal(stop.signal, 60_000);
    stop.abort(new Error('shutting down'));
    expect(a.signal.aborted).toBe(true);
    expect((a.signal.reason as Error).message).toBe('shutting down');
    a.release();

    const b = stepSignal(new AbortController().signal, 20);
    await new Promise((r) => setTimeout(r, 60));
    expect(b.signal.aborted).toBe(true);
    expect((b.signal.reason as DOMException).name).toBe('TimeoutError');
    b.release();
  });

  it('leaves no timer and no stop listener behind once released, over 1,000 steps', () => {
    const stop = new AbortController().signal;
    const before = timers();
    for (let i = 0; i < 1_000; i++) stepSignal(stop, 780_000).release();
    expect(timers()).toBe(before);
    expect(getEventListeners(stop, 'abort')).toHaveLength(0);
    // Unreleased, each step holds both until its wall clock: what release() is for.
    const held = Array.from({ length: 10 }, () => stepSignal(stop, 780_000));
    expect(timers()).toBe(before + 10);
    expect(getEventListeners(stop, 'abort')).toHaveLength(10);
    for (const h of held) h.release();
    expect(timers()).toBe(before);
  });
});
