// The database traffic of an idle API process (issue 15: Chronos and pg-boss raised it): one
// `npm start` process with its defaults on a fresh PostgreSQL database, nothing scheduled and no
// requests; committed transactions per second from pg_stat_database over BENCH_IDLE_SECONDS (60),
// after BENCH_IDLE_SETTLE_SECONDS (20) for start-up to finish.
import { spawnApi, type ApiProcess } from '../support/api.ts';
import { createTestDatabase, sql } from '../support/postgres.ts';
import { machine } from './stats.ts';

const SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 60);
const SETTLE = Number(process.env.BENCH_IDLE_SETTLE_SECONDS ?? 20);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** xact_commit of the database; the read is one transaction (counted and subtracted). */
async function commits(url: string): Promise<number> {
  await sleep(1500); // backends publish their counters at most once a second
  const rows = await sql<{ n: string }>(
    url,
    'SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()',
  );
  return Number(rows[0]!.n);
}

export async function benchChronosIdle(): Promise<string> {
  const db = await createTestDatabase('bench_idle');
  let api: ApiProcess | undefined;
  try {
    api = await spawnApi({ DATABASE_URL: db.url, ADMIN_TOKEN: 'bench-idle-admin-token-0123' });
    await sleep(SETTLE * 1000);
    const before = await commits(db.url);
    const started = Date.now();
    await sleep(SECONDS * 1000);
    const after = await commits(db.url);
    const seconds = (Date.now() - started) / 1000;
    const perSecond = (after - before - 1) / seconds;
    return [
      `### Idle API database traffic (${machine()})`,
      '',
      `One API process (\`npm start\`, defaults, DATABASE_URL, no Kubernetes), nothing scheduled, no requests: ${after - before - 1} transactions committed in ${seconds.toFixed(1)} s = **${perSecond.toFixed(2)} xact_commit/s** (pg_stat_database, after ${SETTLE} s of start-up).`,
    ].join('\n');
  } finally {
    await api?.stop();
    await db.drop();
  }
}
