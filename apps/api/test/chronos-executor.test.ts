// The executor's writer of execution ends (src/chronos/executor.ts): an end that cannot be written
// because the database is unreachable is written again once it is back — an execution whose steps
// ran is not recorded as failed "on Berth's side" for a write that failed once.
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { executor } from '../src/chronos/executor.ts';
import type { ClaimedExecution, ExecutionEnd } from '../src/chronos/queue-repository.ts';

const unreachable = () =>
  Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });

function claimed(id: string): ClaimedExecution {
  return { execution: { id, attempts: 1 }, run: { id: 'run_1' } } as unknown as ClaimedExecution;
}

describe('executor: ends written while the database is away', () => {
  it('writes a succeeded end again until the database is back; nothing is recorded as failed', async () => {
    const written: { id: string; end: ExecutionEnd }[] = [];
    let failures = 2;
    const sleeps: number[] = [];
    const results: Promise<boolean>[] = [];
    const queued = [claimed('exe_1')];
    const x = executor({
      repo: {
        claim: async () => queued.splice(0),
        finish: async (ends) => {
          if (failures-- > 0) throw unreachable();
          for (const e of ends) written.push({ id: e.id, end: e.end });
          return new Set(ends.map((e) => e.id));
        },
      },
      worker: 'w1',
      concurrency: 1,
      run: (batch) =>
        batch.map(async (c) => {
          const done = x.finish(c.execution.id, { status: 'succeeded', reason: null }, 1);
          results.push(done);
          await done;
        }),
      logger: pino({ level: 'silent' }),
      sleep: async (ms) => void sleeps.push(ms),
    });
    x.wake();
    await new Promise((r) => setTimeout(r, 20));
    await Promise.all(results);
    expect(await results[0]).toBe(true);
    expect(written).toEqual([{ id: 'exe_1', end: { status: 'succeeded', reason: null } }]);
    expect(sleeps).toEqual([250, 500]);
    await x.close(100);
  });

  it('another error is not retried: the end fails as before', async () => {
    const x = executor({
      repo: {
        claim: async () => [],
        finish: async () => {
          throw new Error('check constraint violated');
        },
      },
      worker: 'w1',
      concurrency: 1,
      run: () => [],
      logger: pino({ level: 'silent' }),
      sleep: async () => {},
    });
    await expect(x.finish('exe_2', { status: 'succeeded', reason: null }, 1)).rejects.toThrow(
      /check constraint/,
    );
    await x.close(100);
  });
});
