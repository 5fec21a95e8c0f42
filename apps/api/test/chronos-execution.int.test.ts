// Chronos executions on one API, real PostgreSQL, pg-boss, an engine simulator behind a catalog
// model and a real MCP server as a managed tool: a two-step run whose tool step uses the chat
// step's output, its cost in the ledger and usage; a scheduled fire with an empty balance recorded
// as failed with the reason; a failing step ends the execution with the step's error.
import { randomUUID } from 'node:crypto';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { startMcpServer, type TestMcpServer } from '@berth/test/support/mcp-server';
import { sql } from '@berth/test/support/postgres';

let api: TestApi;
let engine: Awaited<ReturnType<typeof startEngineSim>>;
let mcp: TestMcpServer;
type Account = Awaited<ReturnType<TestApi['newAccount']>>;
let acct: Account;

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });
const call = (key: string, method: string, path: string, body?: unknown) =>
  fetch(api.url + path, {
    method,
    headers: json(key),
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });

interface Execution {
  id: string;
  status: string;
  reason: string | null;
  cost: string;
  trigger: string;
  scheduled_for: string | null;
  attempts: number;
  steps: {
    index: number;
    type: string;
    status: string;
    output: string | null;
    error: string | null;
    cost: string;
    model?: string;
    tool?: string;
  }[];
}
const executions = async (key: string, runId: string): Promise<Execution[]> =>
  (await (await call(key, 'GET', `/api/chronos/runs/${runId}/executions`)).json()).data;
const finished = async (key: string, runId: string, n = 1) => {
  let list: Execution[] = [];
  await eventually(
    async () => {
      list = await executions(key, runId);
      return list.length >= n && list.every((e) => e.status === 'succeeded' || e.status === 'failed');
    },
    { timeout: 30_000, interval: 200 },
  );
  return list;
};

async function newChronosAccount(amount?: string): Promise<Account> {
  const a = await api.newAccount();
  expect((await call(a.global, 'POST', '/api/tools', { tool_id: 'chronos' })).status).toBe(200);
  if (amount) {
    const res = await api.admin(`/admin/accounts/${a.id}/credits`, {
      method: 'POST',
      body: JSON.stringify({ amount }),
      headers: { 'idempotency-key': randomUUID() },
    });
    expect(res.status).toBe(201);
  }
  return a;
}

/**
 * Moves a run's pending fire to now (the run's row is its pending fire): the API's next 5 s look
 * finds it due. Returns the occurrence the execution is recorded for.
 */
async function fireNow(runId: string): Promise<string> {
  const rows = await sql<{ next_fire_at: Date }>(
    api.db.url,
    `UPDATE chronos_runs SET next_fire_at = date_trunc('second', now()) WHERE id = $1 RETURNING next_fire_at`,
    [runId],
  );
  expect(rows).toHaveLength(1);
  return rows[0]!.next_fire_at.toISOString();
}

beforeAll(async () => {
  [engine, mcp] = await Promise.all([
    startEngineSim({ model: 'org/primary', ttftMs: 0, itlMs: 1, outputTokens: 8 }),
    startMcpServer(),
  ]);
  api = await startTestApi({
    BILLING_FLUSH_INTERVAL_MS: '200',
    BERTH_SECRETS_KEY: 'cd'.repeat(32),
    CHRONOS_RUN_FEE: '0.010',
  });
  await api.chatModel(
    'main',
    { engineUrl: engine.url, model: 'org/primary' },
    { inputPerMTok: '1.00', outputPerMTok: '2.00' },
  );
  const tool = await api.admin('/admin/tools/weather', {
    method: 'PUT',
    body: JSON.stringify({ description: 'test tools', url: mcp.url, price_per_call: '0.002' }),
  });
  expect(tool.status).toBe(201);
  acct = await newChronosAccount('5.00');
  expect((await call(acct.global, 'POST', '/api/tools', { tool_id: 'weather' })).status).toBe(200);
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await Promise.all([engine?.close(), mcp?.close()]);
});

describe('a run whose second step uses the first step’s output', () => {
  it('runs chat then tool, with each output, the costs, and the charge in the ledger', async () => {
    const created = await call(acct.inference, 'POST', '/api/chronos/runs', {
      name: 'weather-of-the-answer',
      schedule: '0 3 * * *',
      timezone: 'Europe/Berlin',
      steps: [
        { type: 'chat', model: 'main', messages: [{ role: 'user', content: 'Name a city' }], max_tokens: 8 },
        {
          type: 'tool',
          tool_id: 'weather',
          name: 'weather',
          input: { city: 'the city of {{steps.0.output}}' },
        },
      ],
    });
    expect(created.status).toBe(201);
    const run = await created.json();
    const before = (await (await call(acct.global, 'GET', '/api/billing/balance')).json()).balance;
    const trigger = await call(acct.global, 'POST', `/api/chronos/runs/${run.id}/trigger`);
    expect(trigger.status).toBe(202);
    const queued = await trigger.json();
    expect(queued.status).toBe('queued');

    const [e] = await finished(acct.global, run.id);
    expect(e!.id).toBe(queued.id);
    expect(e!.status, e!.reason ?? '').toBe('succeeded');
    expect(e!.reason).toBeNull();
    expect(e!.attempts).toBe(1);
    const [chat, tool] = e!.steps;
    expect(chat).toMatchObject({ index: 0, type: 'chat', status: 'succeeded', model: 'main', error: null });
    expect(chat!.output!.length).toBeGreaterThan(0);
    expect(tool).toMatchObject({
      index: 1,
      type: 'tool',
      status: 'succeeded',
      tool: 'weather',
      cost: '0.002000',
    });
    expect(tool!.output).toBe(`Sunny, 21 C in the city of ${chat!.output}`);
    expect(mcp.calls.at(-1)).toMatchObject({
      name: 'weather',
      args: { city: `the city of ${chat!.output}` },
    });

    // Fee + chat (tokens at the catalog price) + tool price.
    const micro = (s: string) => BigInt(s.replace('.', ''));
    expect(micro(chat!.cost)).toBeGreaterThan(0n);
    expect(micro(e!.cost)).toBe(10_000n + micro(chat!.cost) + 2_000n);

    // The ledger: the balance went down by exactly the execution's cost (charges are flushed in batches).
    await eventually(
      async () => {
        const now = (await (await call(acct.global, 'GET', '/api/billing/balance')).json()).balance;
        return micro(before) - micro(now) === micro(e!.cost);
      },
      { timeout: 10_000, interval: 200 },
    );
    const usage = (await (await call(acct.global, 'GET', '/api/billing/usage')).json()).data as {
      model: string;
      cost: string;
    }[];
    const byModel = Object.fromEntries(usage.map((u) => [u.model, u.cost]));
    expect(byModel).toMatchObject({ chronos: '0.010000', 'tool:weather': '0.002000', main: chat!.cost });
  });
});

describe('balance', () => {
  it('a scheduled fire the balance cannot cover is recorded as failed, with the reason', async () => {
    const poor = await newChronosAccount();
    const created = await call(poor.global, 'POST', '/api/chronos/runs', {
      name: 'poor',
      schedule: '*/5 * * * *',
      timezone: 'UTC',
      steps: [{ type: 'chat', model: 'main', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }],
    });
    expect(created.status).toBe(201);
    const run = await created.json();
    const at = await fireNow(run.id);
    const [e] = await finished(poor.global, run.id);
    expect(new Date(e!.scheduled_for!).toISOString()).toBe(at);
    expect(e).toMatchObject({
      trigger: 'schedule',
      status: 'failed',
      reason:
        'Insufficient balance / payment required: the balance cannot cover the run fee and the first step',
      cost: '0.000000',
      steps: [],
    });
    // The schedule goes on: the next fire is the occurrence after.
    const after = await (await call(poor.global, 'GET', `/api/chronos/runs/${run.id}`)).json();
    const next = new Date(after.next_fire_at).getTime();
    expect(next % 300_000).toBe(0);
    expect(next).toBeGreaterThan(Date.parse(at));
    expect(next - Date.parse(at)).toBeLessThanOrEqual(300_000 + 10_000); // the fire came within 10 s
    // Nothing was charged.
    expect((await (await call(poor.global, 'GET', '/api/billing/balance')).json()).balance).toBe('0.000000');
  });
});

describe('missed fires', () => {
  it('a fire missed while no replica ran runs once, late; the occurrences between are skipped', async () => {
    const created = await call(acct.global, 'POST', '/api/chronos/runs', {
      name: 'missed',
      schedule: '*/5 * * * *',
      timezone: 'UTC',
      steps: [{ type: 'chat', model: 'main', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }],
    });
    const run = await created.json();
    // As if the platform had been down for two hours: the pending fire is for an occurrence then.
    const missed = new Date(Math.floor((Date.now() - 2 * 3_600_000) / 300_000) * 300_000).toISOString();
    const moved = await sql(
      api.db.url,
      'UPDATE chronos_runs SET next_fire_at = $2 WHERE id = $1 RETURNING id',
      [run.id, missed],
    );
    expect(moved).toHaveLength(1);
    const list = await finished(acct.global, run.id);
    expect(list).toHaveLength(1);
    expect(new Date(list[0]!.scheduled_for!).toISOString()).toBe(missed);
    expect(list[0]!.status).toBe('succeeded');
    // The schedule continues from now: the next fire is the first */5 occurrence in the future.
    const after = await (await call(acct.global, 'GET', `/api/chronos/runs/${run.id}`)).json();
    const next = new Date(after.next_fire_at).getTime();
    expect(next).toBeGreaterThan(Date.now() - 5_000);
    expect(next - Date.now()).toBeLessThanOrEqual(300_000);
    expect(next % 300_000).toBe(0);
  });
});

describe('a failing step', () => {
  it('ends the execution failed, naming the step and its error; later steps do not run', async () => {
    const created = await call(acct.global, 'POST', '/api/chronos/runs', {
      name: 'failing',
      schedule: '@daily',
      timezone: 'UTC',
      steps: [
        { type: 'tool', tool_id: 'weather', name: 'fail', input: {} },
        {
          type: 'chat',
          model: 'main',
          messages: [{ role: 'user', content: '{{steps.0.output}}' }],
          max_tokens: 8,
        },
      ],
    });
    const run = await created.json();
    expect((await call(acct.global, 'POST', `/api/chronos/runs/${run.id}/trigger`)).status).toBe(202);
    const [e] = await finished(acct.global, run.id);
    expect(e!.status).toBe('failed');
    expect(e!.reason).toMatch(/^Step 0 \(tool\) failed: .*the fail tool failed on purpose/);
    expect(e!.steps).toHaveLength(1);
    expect(e!.steps[0]).toMatchObject({ status: 'failed', output: null });
  });
});

describe('a chat step in a process that has answered ordinary calls', () => {
  it('runs on a manual trigger and on a scheduled fire after a non-streamed chat completion', async () => {
    // The process's first answers: a non-streamed Elastic call (and a streamed one), as a user's
    // day starts; Chronos's steps must not depend on what those left behind.
    const plain = await call(acct.inference, 'POST', '/api/chat/completions', {
      model: 'main',
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 4,
    });
    expect(plain.status).toBe(200);
    await plain.json();
    const streamed = await call(acct.inference, 'POST', '/api/chat/completions', {
      model: 'main',
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 4,
      stream: true,
    });
    expect(streamed.status).toBe(200);
    await streamed.text();

    const created = await call(acct.global, 'POST', '/api/chronos/runs', {
      name: 'after-ordinary-calls',
      schedule: '*/5 * * * *',
      timezone: 'UTC',
      steps: [{ type: 'chat', model: 'main', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }],
    });
    expect(created.status).toBe(201);
    const run = await created.json();
    expect((await call(acct.global, 'POST', `/api/chronos/runs/${run.id}/trigger`)).status).toBe(202);
    await fireNow(run.id);
    const list = await finished(acct.global, run.id, 2);
    expect(list.map((e) => e.trigger).sort()).toEqual(['manual', 'schedule']);
    for (const e of list) {
      expect(e.status, e.reason ?? '').toBe('succeeded');
      expect(e.steps[0]).toMatchObject({ status: 'succeeded', model: 'main', error: null });
      // The step's cost is what the wallet settled: the usage row holds the same amount.
      expect(BigInt(e.steps[0]!.cost.replace('.', ''))).toBeGreaterThan(0n);
    }
  });
});

describe('the run fee', () => {
  it('is not charged when the execution failed on Berth’s side before any step reached a model', async () => {
    // A catalog model whose only backend is down: no engine ever sees the step.
    const put = await api.admin('/admin/models/down', {
      method: 'PUT',
      body: JSON.stringify({
        kind: 'chat',
        backends: [{ baseUrl: 'http://127.0.0.1:9/v1', model: 'org/down' }],
        pricing: { inputPerMTok: '1.00', outputPerMTok: '2.00' },
      }),
    });
    expect(put.status).toBe(201);
    const owner = await newChronosAccount('1.00');
    const created = await call(owner.global, 'POST', '/api/chronos/runs', {
      name: 'down',
      schedule: '@daily',
      timezone: 'UTC',
      steps: [{ type: 'chat', model: 'down', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }],
    });
    const run = await created.json();
    expect((await call(owner.global, 'POST', `/api/chronos/runs/${run.id}/trigger`)).status).toBe(202);
    const [e] = await finished(owner.global, run.id);
    expect(e).toMatchObject({ status: 'failed', cost: '0.000000', fee: '0.000000' });
    expect(e!.reason).toMatch(
      /^Step 0 \(chat\) failed: .* \(no step reached a model or tool, so the run fee was not charged\)$/,
    );
    await api.billing.wallet.flush();
    expect((await (await call(owner.global, 'GET', '/api/billing/balance')).json()).balance).toBe('1.000000');
  });

  it('is charged once a step reached a model, and the execution shows it', async () => {
    const owner = await newChronosAccount('1.00');
    const created = await call(owner.global, 'POST', '/api/chronos/runs', {
      name: 'up',
      schedule: '@daily',
      timezone: 'UTC',
      steps: [{ type: 'chat', model: 'main', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }],
    });
    const run = await created.json();
    expect((await call(owner.global, 'POST', `/api/chronos/runs/${run.id}/trigger`)).status).toBe(202);
    const [e] = await finished(owner.global, run.id);
    expect(e).toMatchObject({ status: 'succeeded', fee: '0.010000' });
  });
});

describe('manual triggers at once', () => {
  it('accept only what the balance can start, and every accepted execution starts', async () => {
    // Each admission holds the fee (0.010) and the first step's bound: 0.05 covers four.
    const owner = await newChronosAccount('0.05');
    const created = await call(owner.global, 'POST', '/api/chronos/runs', {
      name: 'burst',
      schedule: '@daily',
      timezone: 'UTC',
      steps: [{ type: 'chat', model: 'main', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }],
    });
    const run = await created.json();
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => call(owner.global, 'POST', `/api/chronos/runs/${run.id}/trigger`)),
    );
    const accepted = answers.filter((r) => r.status === 202).length;
    const refused = answers.filter((r) => r.status === 402).length;
    expect(accepted + refused).toBe(20);
    expect(accepted).toBeGreaterThanOrEqual(1);
    expect(accepted).toBeLessThanOrEqual(4);
    const list = await finished(owner.global, run.id, accepted);
    expect(list).toHaveLength(accepted);
    for (const e of list) expect(e.status, e.reason ?? '').toBe('succeeded');
  });
});
