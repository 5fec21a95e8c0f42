import { describe, expect, it } from 'vitest';
import { TerminalError, WorkQueue } from '../src/core/queue.ts';

const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms));
async function until(cond: () => boolean, ms = 2000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met');
    await tick(2);
  }
}

describe('WorkQueue', () => {
  it('deduplicates keys that are waiting', async () => {
    const seen: string[] = [];
    const q = new WorkQueue(async (k) => void seen.push(k), { concurrency: 1 });
    q.add('a'); // starts at once
    q.add('b');
    q.add('b');
    q.add('b');
    await until(() => seen.length >= 2);
    await tick(20);
    expect(seen).toEqual(['a', 'b']);
  });

  it('an urgent key (a wake) goes ahead of a resync of 1,000 keys, also when it was queued among them', async () => {
    const seen: string[] = [];
    let release = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const q = new WorkQueue(
      async (k) => {
        seen.push(k);
        if (k === 'busy') await gate;
      },
      { concurrency: 1 },
    );
    q.add('busy'); // holds the only worker while the resync queues
    for (let i = 0; i < 1000; i++) q.add(`ep-${i}`);
    q.add('wake-new', true);
    q.add('ep-500', true); // queued already: moved to the front
    q.add('ep-500', true); // and once only
    expect(q.depth).toBe(1001);
    release();
    await until(() => seen.length === 1002);
    expect(seen.slice(0, 3)).toEqual(['busy', 'ep-500', 'wake-new']);
    expect(seen.filter((k) => k === 'ep-500')).toHaveLength(1);
    expect(seen.at(-1)).toBe('ep-999');
  });

  it('runs at most one handler per key and re-runs a key added meanwhile', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    let runs = 0;
    let release!: () => void;
    const q = new WorkQueue(
      async () => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        runs++;
        if (runs === 1) await new Promise<void>((r) => (release = r));
        inFlight--;
      },
      { concurrency: 4 },
    );
    q.add('k');
    await until(() => runs === 1);
    q.add('k');
    q.add('k');
    await tick(10);
    expect(runs).toBe(1); // still one in flight
    release();
    await until(() => runs === 2);
    await tick(20);
    expect(runs).toBe(2);
    expect(maxInFlight).toBe(1);
  });

  it('processes different keys concurrently up to the limit', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    const q = new WorkQueue(
      async () => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        await tick(10);
        inFlight--;
      },
      { concurrency: 3 },
    );
    for (const k of ['a', 'b', 'c', 'd', 'e']) q.add(k);
    expect(q.depth).toBe(2);
    await until(() => q.depth === 0 && inFlight === 0);
    expect(maxInFlight).toBe(3);
  });

  it('retries failures with per-key exponential backoff and resets on success', async () => {
    const times: number[] = [];
    const outcomes: string[] = [];
    const q = new WorkQueue(
      async () => {
        times.push(Date.now());
        if (times.length < 4) throw new Error('transient');
      },
      { baseDelayMs: 20, maxDelayMs: 1000, onOutcome: (_k, o) => outcomes.push(o) },
    );
    q.add('x');
    await until(() => outcomes.length === 4);
    expect(outcomes).toEqual(['error', 'error', 'error', 'success']);
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    expect(gaps[0]).toBeGreaterThanOrEqual(18);
    expect(gaps[1]).toBeGreaterThanOrEqual(38);
    expect(gaps[2]).toBeGreaterThanOrEqual(78);
    expect(q.backoffMs('x')).toBe(20);
  });

  it('caps the backoff', () => {
    const q = new WorkQueue(async () => {}, { baseDelayMs: 100, maxDelayMs: 250 });
    expect(q.backoffMs('never-failed')).toBe(100);
  });

  it('does not retry a terminal error', async () => {
    let runs = 0;
    const outcomes: string[] = [];
    const q = new WorkQueue(
      async () => {
        runs++;
        throw new TerminalError('bad spec');
      },
      { baseDelayMs: 5, onOutcome: (_k, o) => outcomes.push(o) },
    );
    q.add('t');
    await tick(60);
    expect(runs).toBe(1);
    expect(outcomes).toEqual(['terminal']);
  });

  it('requeues after the delay a handler asks for; the earliest delay wins', async () => {
    const times: number[] = [];
    const start = Date.now();
    const q = new WorkQueue(async () => {
      times.push(Date.now() - start);
      return times.length === 1 ? { requeueAfterMs: 40 } : undefined;
    });
    q.add('r');
    await until(() => times.length === 2);
    expect(times[1]).toBeGreaterThanOrEqual(38);
    q.addAfter('s', 500);
    q.addAfter('s', 10);
    await until(() => times.length === 3, 200);
  });

  it('shutdown drops waiting keys and waits for handlers in flight', async () => {
    let finished = 0;
    const q = new WorkQueue(
      async () => {
        await tick(30);
        finished++;
      },
      { concurrency: 1 },
    );
    q.add('a');
    q.add('b');
    q.addAfter('c', 10);
    await tick(1);
    await q.shutdown();
    expect(finished).toBe(1);
    q.add('d');
    await tick(50);
    expect(finished).toBe(1);
  });
});
