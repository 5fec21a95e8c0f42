// Chronos across API processes (two `npm start` processes on one PostgreSQL): 50 runs due in the
// same minute are each executed exactly once (one execution each, 50 model calls at the engine),
// and a process killed in the middle of a run leaves no duplicate: the other process marks the
// execution failed, saying what happened, and the step is not called again.
import { randomUUID } from 'node:crypto';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, spawnApi, type ApiProcess } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { startMcpServer, type TestMcpServer } from '@berth/test/support/mcp-server';
import { createTestDatabase, sql, type TestDatabase } from '@berth/test/support/postgres';

const ADMIN = 'chronos-replicas-admin-token-0123';
let db: TestDatabase;
let a: ApiProcess;
let b: ApiProcess;
let engine: Awaited<ReturnType<typeof startEngineSim>>;
let mcp: TestMcpServer;
let key: string;

const admin = (api: ApiProcess, path: string, method = 'GET', body?: unknown) =>
  fetch(api.url + path, {
    method,
    headers: {
      authorization: `Bearer ${ADMIN}`,
      'content-type': 'application/json',
      'idempotency-key': randomUUID(),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
const call = (api: ApiProcess, method: string, path: string, body?: unknown) =>
  fetch(api.url + path, {
    method,
    headers: { ...bearer(key), 'content-type': 'application/json' },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });

async function engineRequests(): Promise<number> {
  const text = await (await fetch(engine.url + '/metrics')).text();
  let n = 0;
  for (const m of text.matchAll(/^vllm:request_success_total\{[^}]*\} (\d+(?:\.\d+)?)/gm)) n += Number(m[1]);
  return n;
}

const pct = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;

beforeAll(async () => {
  [engine, mcp] = await Promise.all([
    startEngineSim({ model: 'org/primary', ttftMs: 0, itlMs: 1, outputTokens: 4 }),
    startMcpServer(),
  ]);
  db = await createTestDatabase('chronos_replicas');
  const env = {
    DATABASE_URL: db.url,
    ADMIN_TOKEN: ADMIN,
    BILLING_FLUSH_INTERVAL_MS: '200',
  };
  // One after the other: the first installs pg-boss's schema.
  a = await spawnApi(env);
  b = await spawnApi(env);
  expect(
    (
      await admin(a, '/admin/models/main', 'PUT', {
        kind: 'chat',
        backends: [{ baseUrl: engine.url + '/v1', model: 'org/primary' }],
        pricing: { inputPerMTok: '0.10', outputPerMTok: '0.20' },
      })
    ).status,
  ).toBe(201);
  expect(
    (
      await admin(a, '/admin/tools/testtools', 'PUT', {
        description: 'test tools',
        url: mcp.url,
        price_per_call: '0.001',
        timeout_ms: 120_000,
      })
    ).status,
  ).toBe(201);
  const created = await admin(a, '/admin/accounts', 'POST', { name: 'replicas' });
  const { account } = (await created.json()) as { account: { id: string } };
  const global = await admin(a, `/admin/accounts/${account.id}/keys`, 'POST', { name: 'g', scope: 'global' });
  key = ((await global.json()) as { value: string }).value;
  expect((await admin(a, `/admin/accounts/${account.id}/credits`, 'POST', { amount: '50.00' })).status).toBe(
    201,
  );
  for (const tool of ['chronos', 'testtools'])
    expect((await call(a, 'POST', '/api/tools', { tool_id: tool })).status).toBe(200);
  // Both processes see the catalog entry (NOTIFY) before runs are created on either.
  await eventually(async () => (await call(b, 'GET', '/api/models/main')).status === 200, {
    timeout: 10_000,
  });
}, 180_000);

afterAll(async () => {
  // The process killed on purpose has exited already.
  await Promise.all([a, b].filter((p) => p && p.child.signalCode === null).map((p) => p.stop()));
  await Promise.all([engine?.close(), mcp?.close()]);
  await db?.drop();
});

describe('two API processes', () => {
  it('50 runs due in the same minute: each executed exactly once', async () => {
    // The first minute boundary at least 20 s away, as a schedule that fires once a year.
    const due = new Date(Math.ceil((Date.now() + 20_000) / 60_000) * 60_000);
    const schedule = `${due.getUTCMinutes()} ${due.getUTCHours()} ${due.getUTCDate()} ${due.getUTCMonth() + 1} *`;
    const ids: string[] = [];
    for (let i = 0; i < 50; i++) {
      const res = await call(i % 2 ? b : a, 'POST', '/api/chronos/runs', {
        name: `same-minute-${i}`,
        schedule,
        timezone: 'UTC',
        steps: [
          { type: 'chat', model: 'main', messages: [{ role: 'user', content: `run ${i}` }], max_tokens: 4 },
        ],
      });
      expect(res.status).toBe(201);
      const run = (await res.json()) as { id: string; next_fire_at: string };
      expect(new Date(run.next_fire_at).getTime()).toBe(due.getTime());
      ids.push(run.id);
    }
    const enginesBefore = await engineRequests();
    expect(Date.now()).toBeLessThan(due.getTime());

    const done = async () =>
      sql<{ n: number }>(
        db.url,
        `SELECT count(*)::int AS n FROM chronos_executions WHERE status IN ('succeeded', 'failed')`,
      );
    await eventually(async () => (await done())[0]!.n >= 50, { timeout: 120_000, interval: 500 });
    // A duplicate would arrive within a few polls.
    await new Promise((r) => setTimeout(r, 3_000));

    const rows = await sql<{
      created_at: Date;
      run_id: string;
      status: string;
      scheduled_for: Date;
      started_at: Date;
      worker: string;
      attempts: number;
    }>(
      db.url,
      'SELECT run_id, status, scheduled_for, created_at, started_at, worker, attempts FROM chronos_executions',
    );
    expect(rows).toHaveLength(50);
    expect(new Set(rows.map((r) => r.run_id))).toEqual(new Set(ids));
    for (const r of rows) {
      expect(r.status).toBe('succeeded');
      expect(new Date(r.scheduled_for).getTime()).toBe(due.getTime());
      expect(r.attempts).toBe(1);
    }
    expect((await engineRequests()) - enginesBefore).toBe(50);
    // Each run's next fire is a year on.
    const next = await sql<{ n: number }>(
      db.url,
      `SELECT count(*)::int AS n FROM chronos_runs WHERE next_fire_at > $1`,
      [new Date(due.getTime() + 300 * 86_400_000)],
    );
    expect(next[0]!.n).toBe(50);

    const delays = rows.map((r) => new Date(r.started_at).getTime() - due.getTime()).sort((x, y) => x - y);
    const fired = rows.map((r) => new Date(r.created_at).getTime() - due.getTime()).sort((x, y) => x - y);
    const workers = new Map<string, number>();
    for (const r of rows) workers.set(r.worker, (workers.get(r.worker) ?? 0) + 1);
    console.error(
      `chronos: 50 runs due at ${due.toISOString()}: recorded (fired) p50 ${pct(fired, 50)} ms, p99 ${pct(fired, 99)} ms; start delay p50 ${pct(delays, 50)} ms, p99 ${pct(delays, 99)} ms, max ${delays.at(-1)} ms; executions per process ${JSON.stringify(Object.fromEntries(workers))}`,
    );
    for (const id of ids) expect((await call(a, 'DELETE', `/api/chronos/runs/${id}`)).status).toBe(200);
  }, 180_000);

  it('a process killed mid-run: no duplicate, the history says what happened', async () => {
    const res = await call(a, 'POST', '/api/chronos/runs', {
      name: 'long-tool',
      schedule: '@yearly',
      timezone: 'UTC',
      steps: [{ type: 'tool', tool_id: 'testtools', name: 'slow', input: { ms: 60_000 } }],
    });
    expect(res.status).toBe(201);
    const run = (await res.json()) as { id: string };
    const trigger = await call(a, 'POST', `/api/chronos/runs/${run.id}/trigger`);
    expect(trigger.status).toBe(202);
    const execution = (await trigger.json()) as { id: string };

    // Running on one of the two processes, in its tool call.
    const running = await eventually(
      async () => {
        const [row] = await sql<{ status: string; worker: string | null }>(
          db.url,
          'SELECT status, worker FROM chronos_executions WHERE id = $1',
          [execution.id],
        );
        return row?.status === 'running' && mcp.calls.some((c) => c.name === 'slow') && row;
      },
      { timeout: 20_000, interval: 100 },
    );
    const pid = Number(running.worker!.split('-')[0]);
    const victim = [a, b].find((p) => p.child.pid === pid)!;
    const survivor = victim === a ? b : a;
    expect(victim).toBeDefined();
    const killedAt = Date.now();
    victim.child.kill('SIGKILL');

    // The survivor is handed the job when the dead one's heartbeat lapses, and ends it failed: within
    // about 15 s (the 10 s heartbeat, refreshed every 5 s, and a look every 5 s), pg-boss's monitor
    // left at its default (JOBS_MONITOR_INTERVAL_SECONDS 30, which alone took 37–40 s).
    const ended = await eventually(
      async () => {
        const list = (await (
          await call(survivor, 'GET', `/api/chronos/runs/${run.id}/executions`)
        ).json()) as {
          data: {
            id: string;
            status: string;
            reason: string | null;
            attempts: number;
            ended_at: string | null;
          }[];
        };
        const e = list.data.find((x) => x.id === execution.id);
        return e?.status === 'failed' && e;
      },
      { timeout: 90_000, interval: 250 },
    );
    const noticedMs = new Date(ended.ended_at!).getTime() - killedAt;
    console.error(
      `chronos: a replica killed mid-run: its execution marked Interrupted ${noticedMs} ms later`,
    );
    expect(noticedMs).toBeGreaterThan(4_000); // a heartbeat is 10 s, refreshed every 5 s
    expect(noticedMs).toBeLessThan(17_000);
    expect(ended.reason).toBe(
      `Interrupted: the API process running this execution (${running.worker}) stopped during step 0; Chronos does not run steps twice, so it was not resumed`,
    );
    expect(ended.attempts).toBe(1);
    await new Promise((r) => setTimeout(r, 3_000));
    expect(mcp.calls.filter((c) => c.name === 'slow')).toHaveLength(1);
    const all = (await (await call(survivor, 'GET', `/api/chronos/runs/${run.id}/executions`)).json()) as {
      data: unknown[];
    };
    expect(all.data).toHaveLength(1);
  }, 150_000);
});
