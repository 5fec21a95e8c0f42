// Chronos fire-time accuracy (issues 15 and 35): how late the first step of a scheduled run starts
// after its due time, for BENCH_CHRONOS_RUNS (1,000) runs due in the same minute, against a baseline
// of BENCH_CHRONOS_BASELINE (10) runs due the minute before, in the same run, on two API processes
// (`npm start`) sharing one PostgreSQL. Each run has one chat step (max_tokens 1) on an engine
// simulator behind a catalog model. Delay = the step's start − the due minute. Also: when the fires
// were recorded (the execution rows, and the API's own berth_chronos_fire_delay_seconds at commit),
// the database transactions and the processes' CPU from just before the due minute to the end.
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { startEngineSim } from '@berth/engine-sim';
import { spawnApi, type ApiProcess } from '../support/api.ts';
import { chronosAccount } from '../support/chronos-account.ts';
import { createTestDatabase, sql, transactionCount } from '../support/postgres.ts';
import { machine, summarize } from './stats.ts';

const RUNS = Number(process.env.BENCH_CHRONOS_RUNS ?? 1000);
const BASELINE = Number(process.env.BENCH_CHRONOS_BASELINE ?? 10);
const ADMIN = 'bench-chronos-admin-token-0123';

/** CPU seconds (user + system) a process has used, from /proc (Linux; 100 ticks a second). */
function cpuSeconds(p: ApiProcess): number {
  const fields = readFileSync(`/proc/${p.child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

export async function benchChronos(): Promise<string> {
  const engine = await startEngineSim({ model: 'org/bench', ttftMs: 0, itlMs: 0, outputTokens: 1 });
  const db = await createTestDatabase('bench_chronos');
  // The shipped defaults (CHRONOS_CONCURRENCY, DB_POOL_SIZE), unless set for the bench.
  const env: Record<string, string> = { DATABASE_URL: db.url, ADMIN_TOKEN: ADMIN, LOG_LEVEL: 'warn' };
  for (const name of ['CHRONOS_CONCURRENCY', 'DB_POOL_SIZE'])
    if (process.env[name]) env[name] = process.env[name];
  const load = loadavg()
    .map((l) => l.toFixed(2))
    .join(' / ');
  const apis: ApiProcess[] = [];
  try {
    // spawnApi waits for the "listening" line, which LOG_LEVEL=warn would hide: info for start-up.
    apis.push(await spawnApi({ ...env, LOG_LEVEL: 'info' }));
    apis.push(await spawnApi({ ...env, LOG_LEVEL: 'info' }));
    const key = await chronosAccount(apis[0]!.url, ADMIN, {
      model: 'bench',
      backend: { baseUrl: engine.url + '/v1', model: 'org/bench' },
      runs: RUNS + BASELINE,
    });
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };

    const baselineDue = new Date(Math.ceil((Date.now() + 30_000) / 60_000) * 60_000);
    const due = new Date(baselineDue.getTime() + 60_000);
    const cron = (d: Date) =>
      `${d.getUTCMinutes()} ${d.getUTCHours()} ${d.getUTCDate()} ${d.getUTCMonth() + 1} *`;
    const create = async (i: number, at: Date) => {
      const res = await fetch(apis[i % apis.length]!.url + '/api/chronos/runs', {
        method: 'POST',
        headers,
        body: JSON.stringify({
          name: `bench-${i}`,
          schedule: cron(at),
          timezone: 'UTC',
          steps: [
            { type: 'chat', model: 'bench', messages: [{ role: 'user', content: `hi ${i}` }], max_tokens: 1 },
          ],
        }),
      });
      if (res.status !== 201) throw new Error(`create: ${res.status} ${await res.text()}`);
    };
    for (let i = 0; i < BASELINE; i++) await create(i, baselineDue);
    const createdAt = Date.now();
    for (let i = 0; i < RUNS; i += 20)
      await Promise.all(
        Array.from({ length: Math.min(20, RUNS - i) }, (_, j) => create(BASELINE + i + j, due)),
      );
    const creationMs = Date.now() - createdAt;
    if (Date.now() >= due.getTime())
      throw new Error(`creating ${RUNS} runs took ${creationMs} ms: past their due time`);

    // Just before the due minute: the database's transactions and the processes' CPU so far.
    await new Promise((r) => setTimeout(r, Math.max(0, due.getTime() - 4_000 - Date.now())));
    const xactBefore = await transactionCount(db.url);
    const cpuBefore = apis.map(cpuSeconds);

    const total = RUNS + BASELINE;
    const deadline = due.getTime() + 240_000;
    let done = 0;
    while (Date.now() < deadline) {
      done = Number(
        (
          await sql(
            db.url,
            `SELECT count(*)::int AS n FROM chronos_executions WHERE status IN ('succeeded', 'failed')`,
          )
        )[0]!.n,
      );
      if (done >= total) break;
      await new Promise((r) => setTimeout(r, 1000));
    }
    const cpu = apis.map((p, i) => cpuSeconds(p) - cpuBefore[i]!);
    const xact = (await transactionCount(db.url)) - xactBefore - 1; // less the first read's own
    // When each fire was recorded, as the API measures it (at commit): its histogram, both processes.
    let within1s = 0;
    let fires = 0;
    for (const p of apis) {
      const text = await (await fetch(p.url + '/metrics')).text();
      within1s += Number(/^berth_chronos_fire_delay_seconds_bucket\{le="1"\} (\d+)/m.exec(text)?.[1] ?? 0);
      fires += Number(/^berth_chronos_fire_delay_seconds_count (\d+)/m.exec(text)?.[1] ?? 0);
    }
    const rows = await sql<{
      scheduled_for: Date;
      created_at: Date;
      results: { startedAt: string }[];
      status: string;
    }>(db.url, 'SELECT scheduled_for, created_at, results, status FROM chronos_executions');
    const delays = (at: Date) =>
      rows
        .filter((r) => new Date(r.scheduled_for).getTime() === at.getTime() && r.results[0])
        .map((r) => new Date(r.results[0]!.startedAt).getTime() - at.getTime());
    const base = summarize(delays(baselineDue));
    // When each fire was recorded (its execution row written): the fire path alone.
    const recorded = summarize(
      rows
        .filter((r) => new Date(r.scheduled_for).getTime() === due.getTime())
        .map((r) => new Date(r.created_at).getTime() - due.getTime()),
    );
    const burstDelays = delays(due);
    const burst = summarize(burstDelays);
    const spanS = (Math.max(...burstDelays) - Math.min(...burstDelays)) / 1000;
    const rate = spanS > 0 ? burstDelays.length / spanS : NaN;
    const failed = rows.filter((r) => r.status !== 'succeeded').length;
    const perRun = new Map<string, number>();
    for (const r of rows) perRun.set(String(r.scheduled_for), (perRun.get(String(r.scheduled_for)) ?? 0) + 1);
    return [
      `### Chronos fire-time accuracy (${machine()})`,
      '',
      `Load average at start ${load}; settings ${JSON.stringify(Object.fromEntries(Object.entries(env).filter(([k]) => k.startsWith('CHRONOS') || k === 'DB_POOL_SIZE')))}.`,
      '',
      `Two API processes, one PostgreSQL; ${RUNS} runs due at ${due.toISOString()} (created in ${creationMs} ms), ${BASELINE} due the minute before as the baseline; one chat step each on an engine simulator. Delay = the first step's start − the due time.`,
      '',
      '| schedules due in the minute | executions | p50 delay | p99 delay | mean |',
      '|---|---|---|---|---|',
      `| ${BASELINE} (baseline) | ${base.n} | ${base.p50.toFixed(0)} ms | ${base.p99.toFixed(0)} ms | ${base.mean.toFixed(0)} ms |`,
      `| ${RUNS} | ${burst.n} | ${burst.p50.toFixed(0)} ms | ${burst.p99.toFixed(0)} ms | ${burst.mean.toFixed(0)} ms |`,
      '',
      `Fires recorded (execution rows written) p50 ${recorded.p50.toFixed(0)} ms, p99 ${recorded.p99.toFixed(0)} ms after the due time; at commit (berth_chronos_fire_delay_seconds of both processes): ${within1s} of ${fires} fires within 1 s.`,
      '',
      `From 4 s before the due minute until every execution ended: ${xact} database transactions (${(xact / total).toFixed(2)} per execution, background included); CPU of the API processes ${cpu.map((c) => c.toFixed(1) + ' s').join(' and ')}.`,
      '',
      `Throughput: ${burstDelays.length} first steps started over ${spanS.toFixed(1)} s = ${rate.toFixed(1)} executions/s for both processes together.`,
      '',
      `Executions recorded: ${rows.length} of ${total} expected (${done} finished within 4 minutes of the due time), ${failed} not succeeded; p99 is ${(burst.p99 / Math.max(1, base.p99)).toFixed(1)}× the baseline's.`,
    ].join('\n');
  } finally {
    await Promise.all(apis.map((p) => p.stop()));
    await engine.close();
    await db.drop();
  }
}
