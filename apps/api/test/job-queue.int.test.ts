import { PGlite } from '@electric-sql/pglite';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startJobQueue, type JobQueue } from '../src/platform/jobs.ts';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';
import { eventually } from '@berth/test/support/eventually';

const logger = pino({ level: 'silent' });

describe('job queue on PostgreSQL, two replicas', () => {
  let db: TestDatabase;
  const queues: JobQueue[] = [];
  beforeAll(async () => {
    db = await createTestDatabase('jobs');
    // Sequentially: the first start installs pg-boss's schema.
    for (let i = 0; i < 2; i++)
      queues.push(await startJobQueue({ kind: 'postgres', url: db.url }, logger, { cronIntervalSeconds: 1 }));
  });
  afterAll(async () => {
    await Promise.all(queues.map((q) => q.stop()));
    await db?.drop();
  });

  it('runs each occurrence of a schedule once, on one replica', async () => {
    // pg-boss sends at most one job per schedule a minute: four schedules make four occurrences at
    // the next minute, each of which both replicas see due.
    const runs: { replica: number; key: string }[] = [];
    const keys = ['a', 'b', 'c', 'd'];
    for (const [replica, q] of queues.entries()) {
      for (const key of keys) {
        await q.schedule<{ key: string }>(
          'every-minute',
          '* * * * *',
          async (data) => {
            runs.push({ replica, key: data.key });
          },
          { key, data: { key } },
        );
      }
    }
    await eventually(() => runs.length >= keys.length, { timeout: 90_000, interval: 250 });
    await new Promise((r) => setTimeout(r, 4000)); // a duplicate would arrive within a poll or two
    expect(runs.map((r) => r.key).sort()).toEqual(keys);
  }, 120_000);

  it('hands each sent job to exactly one replica, a burst without waiting for the backstop poll', async () => {
    // Each worker takes one job per fetch and is woken by NOTIFY; ten jobs sent at once wake each
    // worker once or twice, and the rest must not wait for the 30 s backstop poll.
    const seen: { replica: number; n: number }[] = [];
    await Promise.all(
      queues.map((q, replica) =>
        q.work<{ n: number }>('once', async ({ n }) => {
          await new Promise((r) => setTimeout(r, 20));
          seen.push({ replica, n });
        }),
      ),
    );
    const sent = Date.now();
    await Promise.all(Array.from({ length: 10 }, (_, i) => queues[i % 2]!.send('once', { n: i })));
    await eventually(() => seen.length >= 10, { timeout: 15_000 }).catch(() => {
      throw new Error(`${seen.length} of 10 jobs handled ${Date.now() - sent} ms after they were sent`);
    });
    await new Promise((r) => setTimeout(r, 2500)); // a duplicate would show up within a poll
    expect(seen.map((s) => s.n).sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });
});

describe('job queue on the embedded database (PGlite)', () => {
  it('installs, runs a sent job and stops without closing the database', async () => {
    const pglite = await PGlite.create();
    const q = await startJobQueue({ kind: 'embedded', pglite }, logger, { pollingIntervalSeconds: 0.5 });
    const done: number[] = [];
    await q.work<{ n: number }>('local', async (d) => {
      done.push(d.n);
    });
    await q.send('local', { n: 7 });
    await eventually(() => done.length === 1, { timeout: 20_000 });
    expect(done).toEqual([7]);
    await q.stop();
    // The application owns the database: still usable after the queue stopped.
    const { rows } = await pglite.query<{ n: number }>('SELECT count(*)::int AS n FROM pgboss.job');
    expect(rows[0]!.n).toBeGreaterThanOrEqual(1);
    await pglite.close();
  });
});
