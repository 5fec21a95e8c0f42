// Chronos pre-warm in local mode on real PostgreSQL: a catalog model served by a platform endpoint
// (an engine-simulator process run by local mode's runtime) that has hibernated is woken
// CHRONOS_PREWARM_SECONDS (45) before a run's scheduled fire, through the proxy's wake path, once,
// without charging anything, and — its idle timeout (15 s) being shorter than the lead — kept awake
// until the fire; at the due minute the run's first step finds it up (no second wake, no wait).
// Before, a pre-warm whose endpoint had an idle timeout shorter than the lead came back at half the
// idle timeout before the fire instead: the pool was woken 7.5 s ahead, not 45.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { sql } from '@berth/test/support/postgres';

const PREWARM_SECONDS = 45;
/** The engine's start-up: every wake takes at least this long. */
const STARTUP_MS = 2_000;
let dataDir: string;
let api: TestApi;
let platform: Awaited<ReturnType<TestApi['newAccount']>>;
let user: Awaited<ReturnType<TestApi['newAccount']>>;
let pool: string;

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });
const phase = async (id: string) =>
  (
    (await (await fetch(`${api.url}/api/endpoints/${id}`, { headers: bearer(platform.compute) })).json()) as {
      status: string;
    }
  ).status;
const balance = async () =>
  (
    (await (await fetch(`${api.url}/api/billing/balance`, { headers: bearer(user.global) })).json()) as {
      balance: string;
    }
  ).balance;
/** One series of /metrics (0 when absent). */
const metric = async (series: string) => {
  const text = await (await fetch(`${api.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line ? Number(line.slice(series.length + 1)) : 0;
};
const wakeRequests = async () => {
  const logs = await (
    await fetch(`${api.url}/api/endpoints/${pool}/logs`, { headers: bearer(platform.compute) })
  ).text();
  return logs.match(/WakeRequested/g)?.length ?? 0;
};

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), 'berth-chronos-prewarm-'));
  api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: dataDir,
    BERTH_LOCAL_ENGINE_ARGS: `--ttft-ms 0 --itl-ms 1 --output-tokens 4 --startup-delay-ms ${STARTUP_MS}`,
    BILLING_FLUSH_INTERVAL_MS: '200',
    CHRONOS_PREWARM_SECONDS: String(PREWARM_SECONDS),
  });
  platform = await api.newAccount();
  user = await api.newAccount();
  const created = await fetch(`${api.url}/api/endpoints`, {
    method: 'POST',
    headers: json(platform.compute),
    body: JSON.stringify({
      name: 'pool',
      model: 'org/pool',
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
    }),
  });
  expect(created.status).toBe(201);
  pool = ((await created.json()) as { id: string }).id;
  await eventually(async () => (await phase(pool)) === 'up', { timeout: 60_000, description: 'pool up' });
  const put = await api.admin('/admin/models/pool', {
    method: 'PUT',
    body: JSON.stringify({
      kind: 'chat',
      backends: [{ endpoint: pool }],
      pricing: { inputPerMTok: '1.00', outputPerMTok: '2.00' },
    }),
  });
  expect(put.status, await put.clone().text()).toBe(201);
  const credit = await api.admin(`/admin/accounts/${user.id}/credits`, {
    method: 'POST',
    body: JSON.stringify({ amount: '5.00' }),
    headers: { 'idempotency-key': randomUUID() },
  });
  expect(credit.status).toBe(201);
  const enable = await fetch(`${api.url}/api/tools`, {
    method: 'POST',
    headers: json(user.global),
    body: JSON.stringify({ tool_id: 'chronos' }),
  });
  expect(enable.status).toBe(200);
}, 120_000);

afterAll(async () => {
  await api?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('Chronos pre-warm', () => {
  it('wakes a hibernated endpoint before the fire; the first step finds it up', async () => {
    await eventually(async () => (await phase(pool)) === 'hibernated', {
      timeout: 90_000,
      interval: 500,
      description: 'pool hibernated',
    });
    const wakesBefore = await wakeRequests();
    // The first minute boundary with room for the pre-warm lead and the creation before it.
    const due = new Date(Math.ceil((Date.now() + (PREWARM_SECONDS + 8) * 1000) / 60_000) * 60_000);
    const schedule = `${due.getUTCMinutes()} ${due.getUTCHours()} ${due.getUTCDate()} ${due.getUTCMonth() + 1} *`;
    const res = await fetch(`${api.url}/api/chronos/runs`, {
      method: 'POST',
      headers: json(user.inference),
      body: JSON.stringify({
        name: 'prewarmed',
        schedule,
        timezone: 'UTC',
        steps: [{ type: 'chat', model: 'pool', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }],
      }),
    });
    expect(res.status).toBe(201);
    const run = (await res.json()) as { id: string; next_fire_at: string };
    expect(new Date(run.next_fire_at).getTime()).toBe(due.getTime());
    const credited = await balance();

    // Still asleep until the lead time before the fire.
    expect(await phase(pool)).toBe('hibernated');
    const upAt = await eventually(
      async () => {
        if (Date.now() >= due.getTime()) throw new Error('the fire time came before the endpoint was up');
        return (await phase(pool)) === 'up' ? Date.now() : false;
      },
      {
        timeout: due.getTime() - Date.now() + 1_000,
        interval: 200,
        description: 'pool woken before the fire',
      },
    );
    const lead = (due.getTime() - upAt) / 1000;
    console.error(`chronos pre-warm: the pool was up ${lead.toFixed(1)} s before the fire`);
    // Woken at the lead (the engine takes STARTUP_MS to start), not later.
    expect(upAt).toBeGreaterThan(due.getTime() - PREWARM_SECONDS * 1000);
    expect(upAt).toBeLessThan(due.getTime() - PREWARM_SECONDS * 1000 + STARTUP_MS + 4_000);
    // One wake, through the proxy's wake path (its metrics), recorded as a pre-warm; nothing charged,
    // nothing executed yet.
    expect(await wakeRequests()).toBe(wakesBefore + 1);
    expect(await metric('berth_chronos_prewarm_wakes_total')).toBe(1);
    expect(await balance()).toBe(credited);
    const early = (await (
      await fetch(`${api.url}/api/chronos/runs/${run.id}/executions`, { headers: bearer(user.global) })
    ).json()) as { data: unknown[] };
    expect(early.data).toEqual([]);
    // Three idle timeouts until the fire: it stays up all along (activity reported until then).
    while (Date.now() < due.getTime() - 500) {
      expect(await phase(pool)).toBe('up');
      await new Promise((r) => setTimeout(r, 500));
    }

    // The fire, at the due minute: the step runs on the endpoint that is already up.
    const execution = await eventually(
      async () => {
        const list = (await (
          await fetch(`${api.url}/api/chronos/runs/${run.id}/executions`, { headers: bearer(user.global) })
        ).json()) as {
          data: {
            status: string;
            reason: string | null;
            scheduled_for: string;
            steps: { status: string; started_at: string; ended_at: string }[];
          }[];
        };
        const e = list.data[0];
        return e && (e.status === 'succeeded' || e.status === 'failed') ? e : false;
      },
      { timeout: 60_000, interval: 250, description: 'execution finished' },
    );
    expect(execution.status, execution.reason ?? '').toBe('succeeded');
    expect(new Date(execution.scheduled_for).getTime()).toBe(due.getTime());
    const step = execution.steps[0]!;
    expect(new Date(step.started_at).getTime()).toBeGreaterThanOrEqual(due.getTime());
    // No second wake, and the step took less than any wake would have (the engine's start-up alone).
    expect(await wakeRequests()).toBe(wakesBefore + 1);
    const stepMs = new Date(step.ended_at).getTime() - new Date(step.started_at).getTime();
    expect(stepMs).toBeLessThan(STARTUP_MS);
    expect(await metric('berth_chronos_prewarm_wakes_total')).toBe(1);
    // The next fire (a year on) has its pre-warm pending, due the lead before it.
    const [row] = await sql<{ next_fire_at: Date; prewarm_at: Date }>(
      api.db.url,
      'SELECT next_fire_at, prewarm_at FROM chronos_runs WHERE id = $1',
      [run.id],
    );
    expect(row!.next_fire_at.getTime() - row!.prewarm_at.getTime()).toBe(PREWARM_SECONDS * 1000);
  }, 300_000);
});
