// Chronos under replica kills (issue 35): two API processes (./chronos-replica.ts) on one database
// run Chronos on a fast clock (SPEED × real time) across a daylight-saving change, with runs firing
// every minute and runs whose schedule sits in the skipped or the repeated hour; a replica is
// SIGKILLed at random moments — half of them aimed at a minute boundary, at the replica that has
// taken that minute's fires and not yet recorded them — and started again, `kills` times. Then,
// for every run, the occurrences its schedule has up to a cutoff (cron.ts's nextFires) against the
// executions recorded: none missing, none twice, none extra; at the model, no execution's step
// called twice; nothing left queued or running.
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { nextFires, parseCron } from '../../apps/api/src/chronos/cron.ts';
import pg from 'pg';
import { spawnApi, type ApiProcess } from './api.ts';
import { chronosAccount } from './chronos-account.ts';
import { createTestDatabase, sql } from './postgres.ts';
import { runTool } from './process.ts';

const ADMIN = 'chronos-kill-admin-token-0123';
const MINUTE = 60_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface KillSegment {
  zone: string;
  /** The instant of the daylight-saving change (ISO). */
  change: string;
  /** Spring forward (an hour skipped) or fall back (an hour repeated). */
  kind: 'skipped' | 'repeated';
  /** The local hour that is skipped or repeated. */
  hour: number;
  kills: number;
}

export interface SegmentFigures {
  segment: KillSegment;
  runs: number;
  /** Occurrences up to the cutoff, and executions recorded for them. */
  expected: number;
  recorded: number;
  missed: string[];
  doubled: string[];
  extra: string[];
  /** Executions whose replica died mid-run (failed, Interrupted). */
  interrupted: number;
  /** Executions that failed for another reason (their reasons). */
  otherFailures: string[];
  /** The same executions, each with its schedule, times and worker (for the log). */
  otherFailureDetails: string[];
  /** Executions still queued or running at the end. */
  stuck: number;
  /** Model calls per execution above one (a step run twice). */
  repeatedCalls: number;
  kills: number;
  /** Kills of the replica seen holding the fire transaction (its lock on chronos_runs). */
  aimedKills: number;
  /** Kills after which the database counted an aborted transaction of the dead replica. */
  killsInTransaction: number;
  /** Real milliseconds from due time to the fire recorded, converted from the fast clock. */
  fireDelaysMs: number[];
  fakeSpan: string;
}

/** An OpenAI-shaped upstream that answers after 20–300 ms and counts the calls per x-request-id. */
async function recordingUpstream(): Promise<{
  url: string;
  calls: Map<string, number>;
  close(): Promise<void>;
}> {
  const calls = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const id = String(req.headers['x-request-id'] ?? 'none');
      calls.set(id, (calls.get(id) ?? 0) + 1);
      setTimeout(
        () => {
          res.setHeader('content-type', 'application/json');
          res.end(
            JSON.stringify({
              id: `cmpl-${randomUUID()}`,
              object: 'chat.completion',
              created: Math.floor(Date.now() / 1000),
              model: 'org/kill',
              choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
              usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
            }),
          );
        },
        20 + Math.random() * 280,
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

const spawnReplica = (env: Record<string, string>) => spawnApi(env, 'test/support/chronos-replica.ts');

/**
 * Kills the replica holding Chronos's fire transaction (the lock FOR UPDATE takes on chronos_runs),
 * found by polling until `until`: the database names the holder's client port, `ss` the process
 * behind it. Returns the index killed, or -1 when no fire was seen in flight.
 */
async function killFireHolder(dbUrl: string, replicas: ApiProcess[], until: number): Promise<number> {
  const dbPort = new URL(dbUrl).port || '5432';
  const ss = await runTool('ss', ['-Htnp', 'state', 'established', `( dport = :${dbPort} )`]);
  const owner = new Map<number, number>(); // client port → replica index
  for (const line of ss.stdout.split('\n')) {
    const m = /:(\d+)\s+\S+\s+users:\(\("[^"]*",pid=(\d+)/.exec(line);
    const i = m ? replicas.findIndex((p) => p.child.pid === Number(m[2])) : -1;
    if (m && i >= 0) owner.set(Number(m[1]), i);
  }
  const c = new pg.Client({ connectionString: dbUrl });
  await c.connect();
  try {
    while (Date.now() < until) {
      const { rows } = await c.query<{ port: number }>(
        `SELECT a.client_port AS port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE l.locktype = 'relation' AND l.relation = 'chronos_runs'::regclass AND l.mode = 'RowShareLock'`,
      );
      const i = rows.map((r) => owner.get(r.port)).find((x) => x !== undefined);
      if (i !== undefined) {
        replicas[i]!.child.kill('SIGKILL');
        return i;
      }
    }
    return -1;
  } finally {
    await c.end();
  }
}

const kill = (p: ApiProcess) =>
  new Promise<void>((resolve) => {
    if (p.child.exitCode !== null || p.child.signalCode !== null) return resolve();
    p.child.once('exit', () => resolve());
    p.child.kill('SIGKILL');
  });

/** The schedules of a segment: every minute, and ones that sit in the changed hour. */
function schedules(s: KillSegment, everyMinute: number): string[] {
  const h = s.hour;
  const special =
    s.kind === 'skipped'
      ? [`* ${h} * * *`, `30 ${h} * * *`, '0 * * * *', '*/2 * * * *', '*/7 * * * *']
      : [`*/3 ${h} * * *`, `* ${h} * * *`, '0 * * * *', '*/2 * * * *', '*/7 * * * *'];
  return [...Array.from({ length: everyMinute }, () => '* * * * *'), ...special];
}

export async function killSegment(
  s: KillSegment,
  o: { speed: number; everyMinute: number; log?: (line: string) => void },
): Promise<SegmentFigures> {
  const log = o.log ?? (() => {});
  const db = await createTestDatabase('chronos_kill');
  const upstream = await recordingUpstream();
  // The fast clock: `lead` fake minutes before the change when the first replica is up.
  const span = s.kills * 6_000 + 30_000; // real ms the kills take, roughly
  const r0 = Date.now() + 8_000;
  const t0 = Date.parse(s.change) - (span * o.speed) / 2;
  const fakeNow = () => t0 + (Date.now() - r0) * o.speed;
  const realAt = (fake: number) => r0 + (fake - t0) / o.speed;
  const env = {
    DATABASE_URL: db.url,
    ADMIN_TOKEN: ADMIN,
    LOG_LEVEL: 'warn',
    BILLING_FLUSH_INTERVAL_MS: '500',
    TEST_CHRONOS_T0: String(t0),
    TEST_CHRONOS_R0: String(r0),
    TEST_CHRONOS_SPEED: String(o.speed),
  };
  const replicas: ApiProcess[] = [];
  /** The replicas killed and replaced (their output is read at the end). */
  const spawned: ApiProcess[] = [];
  try {
    // One after the other: the first installs pg-boss's schema.
    replicas.push(await spawnReplica(env));
    replicas.push(await spawnReplica(env));
    const list = schedules(s, o.everyMinute);
    const key = await chronosAccount(replicas[0]!.url, ADMIN, {
      backend: { baseUrl: upstream.url + '/v1', model: 'org/kill' },
      model: 'kill',
      runs: list.length,
    });
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const runs: { id: string; schedule: string; first: number }[] = [];
    for (const [i, schedule] of list.entries()) {
      const res = await fetch(replicas[i % 2]!.url + '/api/chronos/runs', {
        method: 'POST',
        headers,
        body: JSON.stringify({
          name: `kill-${i}`,
          schedule,
          timezone: s.zone,
          steps: [
            { type: 'chat', model: 'kill', messages: [{ role: 'user', content: `run ${i}` }], max_tokens: 1 },
          ],
        }),
      });
      if (res.status !== 201) throw new Error(`create: ${res.status} ${await res.text()}`);
      const run = (await res.json()) as { id: string; next_fire_at: string };
      runs.push({ id: run.id, schedule, first: Date.parse(run.next_fire_at) });
    }
    log(`${s.zone} ${s.kind} hour ${s.hour}: ${runs.length} runs from ${new Date(fakeNow()).toISOString()}`);

    let aimed = 0;
    let inTransaction = 0;
    const rollbacks = async () =>
      Number(
        (
          await sql<{ n: string }>(
            db.url,
            'SELECT xact_rollback AS n FROM pg_stat_database WHERE datname = current_database()',
          )
        )[0]!.n,
      );
    for (let k = 0; k < s.kills; k++) {
      const before = await rollbacks();
      let i: number;
      let hit = false;
      if (k % 2 === 0) {
        // Aimed: at the next minute boundary, the replica holding that minute's fire transaction —
        // between taking the due runs and recording their fires.
        const boundary = Math.ceil((fakeNow() + 0.5 * o.speed * 1000) / MINUTE) * MINUTE;
        await sleep(Math.max(0, realAt(boundary) - Date.now() - 30));
        i = await killFireHolder(db.url, replicas, realAt(boundary) + 500);
        hit = i >= 0;
        if (hit) aimed++;
        else i = Math.random() < 0.5 ? 0 : 1; // no fire seen in flight: a random moment instead
      } else {
        await sleep(300 + Math.random() * 2_200);
        i = Math.random() < 0.5 ? 0 : 1;
      }
      const killedAt = Date.now();
      await kill(replicas[i]!);
      log(
        `kill ${k + 1}/${s.kills}: replica ${i}${hit ? ' (the fire transaction holder)' : ''} at real +${((killedAt - r0) / 1000).toFixed(1)} s, Chronos ${new Date(fakeNow()).toISOString()}`,
      );
      await sleep(1_500); // the database notices the closed connections; counters are published
      if ((await rollbacks()) > before) inTransaction++;
      spawned.push(replicas[i]!);
      replicas[i] = await spawnReplica(env);
    }
    // Two more minutes after the last kill; then what was due by then must have run.
    const cutoff = fakeNow() + 2 * MINUTE;
    await sleep(Math.max(0, realAt(cutoff + MINUTE) - Date.now()));
    // Executions of a killed replica are failed within 15 s of its last heartbeat.
    const settle = Date.now() + 25_000;
    const pending = () =>
      sql<{ n: number }>(
        db.url,
        `SELECT count(*)::int AS n FROM chronos_executions WHERE status IN ('queued', 'running') AND scheduled_for <= $1`,
        [new Date(cutoff)],
      );
    while (Date.now() < settle && (await pending())[0]!.n > 0) await sleep(500);
    const stuck = (await pending())[0]!.n;
    await Promise.all(replicas.map((p) => p.stop()));
    // What the replicas logged at warn or error, each message with its count (a killed replica's too).
    const logged = new Map<string, number>();
    for (const p of [...spawned, ...replicas])
      for (const line of p.output().split('\n')) {
        if (!line.startsWith('{')) continue;
        try {
          const j = JSON.parse(line) as { level?: number; msg?: string; err?: { message?: string } };
          if ((j.level ?? 0) < 40) continue;
          const key = `${j.msg ?? ''}${j.err?.message ? `: ${j.err.message.slice(0, 200)}` : ''}`;
          logged.set(key, (logged.get(key) ?? 0) + 1);
        } catch {
          // not a log line
        }
      }
    for (const [msg, n] of logged) log(`replicas logged ${n}× ${msg}`);

    const rows = await sql<{
      id: string;
      run_id: string;
      scheduled_for: Date;
      created_at: Date;
      started_at: Date | null;
      ended_at: Date | null;
      status: string;
      reason: string | null;
      worker: string | null;
      attempts: number;
    }>(
      db.url,
      `SELECT id, run_id, scheduled_for, created_at, started_at, ended_at, status, reason, worker, attempts
         FROM chronos_executions
        WHERE trigger = 'schedule' AND scheduled_for <= $1`,
      [new Date(cutoff)],
    );
    const byRun = new Map<string, number[]>();
    for (const r of rows) byRun.set(r.run_id, [...(byRun.get(r.run_id) ?? []), r.scheduled_for.getTime()]);
    const missed: string[] = [];
    const doubled: string[] = [];
    const extra: string[] = [];
    let expected = 0;
    for (const run of runs) {
      const parsed = parseCron(run.schedule);
      if (!parsed.ok) throw new Error(parsed.message);
      const want = nextFires(parsed.spec, s.zone, new Date(run.first - 1), 10_000)
        .map((d) => d.getTime())
        .filter((t) => t <= cutoff);
      expected += want.length;
      const got = byRun.get(run.id) ?? [];
      const seen = new Set<number>();
      for (const t of got) {
        if (seen.has(t)) doubled.push(`${run.schedule} ${new Date(t).toISOString()}`);
        seen.add(t);
        if (!want.includes(t)) extra.push(`${run.schedule} ${new Date(t).toISOString()}`);
      }
      for (const t of want) if (!seen.has(t)) missed.push(`${run.schedule} ${new Date(t).toISOString()}`);
    }
    const ids = new Set(rows.map((r) => r.id));
    let repeatedCalls = 0;
    for (const [id, n] of upstream.calls) if (ids.has(id) && n > 1) repeatedCalls += n - 1;
    const toFake = (real: number) => t0 + (real - r0) * o.speed;
    const others = rows.filter((r) => r.status === 'failed' && !r.reason?.startsWith('Interrupted'));
    const at = (d: Date | null) =>
      d ? `${d.toISOString()} (real +${((d.getTime() - r0) / 1000).toFixed(1)} s)` : '-';
    return {
      segment: s,
      runs: runs.length,
      expected,
      recorded: rows.length,
      missed,
      doubled,
      extra,
      interrupted: rows.filter((r) => r.status === 'failed' && r.reason?.startsWith('Interrupted')).length,
      otherFailures: others.map((r) => r.reason ?? ''),
      otherFailureDetails: others.map(
        (r) =>
          `${r.id} due ${r.scheduled_for.toISOString()}, recorded ${at(r.created_at)}, started ${at(r.started_at)}, ended ${at(r.ended_at)}, worker ${r.worker ?? '-'}, attempt ${r.attempts}: ${r.reason ?? ''}`,
      ),
      stuck,
      repeatedCalls,
      kills: s.kills,
      aimedKills: aimed,
      killsInTransaction: inTransaction,
      fireDelaysMs: rows.map((r) => (toFake(r.created_at.getTime()) - r.scheduled_for.getTime()) / o.speed),
      fakeSpan: `${new Date(t0).toISOString()} … ${new Date(cutoff).toISOString()}`,
    };
  } catch (err) {
    // Said before the clean-up, which may take a while: the suite's own error, and each replica's state.
    log(`${s.zone} ${s.kind}: the suite stopped: ${(err as Error).stack ?? String(err)}`);
    for (const [i, p] of replicas.entries())
      log(`replica ${i}: exit ${p.child.exitCode ?? p.child.signalCode ?? 'running'}`);
    throw err;
  } finally {
    // `stop` waits for an exit that already happened when a replica was killed and not yet replaced.
    await Promise.all(replicas.map((p) => (p.child.signalCode !== null ? undefined : p.stop())));
    await upstream.close();
    await db.drop();
  }
}

/** The daylight-saving changes of 2026 in America/New_York and Europe/Berlin. */
export const DST_SEGMENTS: Omit<KillSegment, 'kills'>[] = [
  { zone: 'America/New_York', change: '2026-03-08T07:00:00Z', kind: 'skipped', hour: 2 },
  { zone: 'Europe/Berlin', change: '2026-10-25T01:00:00Z', kind: 'repeated', hour: 2 },
  { zone: 'Europe/Berlin', change: '2026-03-29T01:00:00Z', kind: 'skipped', hour: 2 },
  { zone: 'America/New_York', change: '2026-11-01T06:00:00Z', kind: 'repeated', hour: 1 },
];

/**
 * The changes `CHAOS_CHRONOS_CHANGES` selects (comma-separated; unset or empty: all four): an item
 * is a zone (`America/New_York`: both of its changes), or a zone and the change's date or kind
 * (`America/New_York:2026-03-08`, `Europe/Berlin:repeated`).
 */
export function selectSegments(filter: string | undefined): Omit<KillSegment, 'kills'>[] {
  const items = (filter ?? '')
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
  if (!items.length) return DST_SEGMENTS;
  const picked = DST_SEGMENTS.filter((s) =>
    items.some((item) => {
      const [zone, which] = item.split(':');
      return zone === s.zone && (!which || which === s.kind || s.change.startsWith(which));
    }),
  );
  if (!picked.length)
    throw new Error(
      `CHAOS_CHRONOS_CHANGES=${filter} selects none of ${DST_SEGMENTS.map((s) => `${s.zone}:${s.change.slice(0, 10)}`).join(', ')}`,
    );
  return picked;
}

/** Non-Interrupted failure reasons, each with its count, most frequent first. */
export function failureReasons(reasons: readonly string[]): [string, number][] {
  const counts = new Map<string, number>();
  for (const r of reasons) counts.set(r, (counts.get(r) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
}

/** Whether a segment kept every guarantee. */
export const held = (f: SegmentFigures) =>
  f.missed.length === 0 &&
  f.doubled.length === 0 &&
  f.extra.length === 0 &&
  f.otherFailures.length === 0 &&
  f.stuck === 0 &&
  f.repeatedCalls === 0 &&
  f.recorded === f.expected;
