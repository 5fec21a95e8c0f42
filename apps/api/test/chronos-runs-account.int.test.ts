// An account's Chronos runs, on real PostgreSQL: the runs quota (BERTH_QUOTA_CHRONOS_RUNS, the
// operator's override per account; creations at once cannot pass it together), the paged list, a
// schedule stored trimmed, and whom a run belongs to: the account — revoking the key that created it
// does not stop it.
import { randomUUID } from 'node:crypto';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { sql } from '@berth/test/support/postgres';

let api: TestApi;
let engine: Awaited<ReturnType<typeof startEngineSim>>;
type Account = Awaited<ReturnType<TestApi['newAccount']>>;

const call = (key: string, method: string, path: string, body?: unknown) =>
  fetch(api.url + path, {
    method,
    headers: { ...bearer(key), 'content-type': 'application/json' },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
const run = (name: string, schedule = '0 3 * * *') => ({
  name,
  schedule,
  timezone: 'UTC',
  steps: [{ type: 'chat', model: 'main', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 }],
});
const runCount = async (a: Account) =>
  (
    await sql<{ n: number }>(
      api.db.url,
      'SELECT count(*)::int AS n FROM chronos_runs WHERE account_id = $1',
      [a.id],
    )
  )[0]!.n;

async function chronosAccount(): Promise<Account> {
  const a = await api.newAccount();
  expect((await call(a.global, 'POST', '/api/tools', { tool_id: 'chronos' })).status).toBe(200);
  return a;
}

beforeAll(async () => {
  engine = await startEngineSim({ model: 'org/primary', ttftMs: 0, itlMs: 1, outputTokens: 4 });
  const env = {
    BERTH_QUOTA_CHRONOS_RUNS: '5',
    BILLING_FLUSH_INTERVAL_MS: '200',
  };
  api = await startTestApi(env);
  const main = {
    kind: 'chat',
    backends: [{ baseUrl: `${engine.url}/v1`, model: 'org/primary' }],
    pricing: { inputPerMTok: '1.00', outputPerMTok: '2.00' },
  };
  expect((await api.admin('/admin/models/main', { method: 'PUT', body: JSON.stringify(main) })).status).toBe(
    201,
  );
}, 60_000);
afterAll(async () => {
  await api?.stop();
  await engine?.close();
});

describe('the Chronos runs quota', () => {
  it('the sixth run of an account with the default of 5 is 403 quota_exceeded, and nothing is stored', async () => {
    const a = await chronosAccount();
    for (let i = 0; i < 5; i++)
      expect((await call(a.inference, 'POST', '/api/chronos/runs', run(`r${i}`))).status).toBe(201);
    const sixth = await call(a.inference, 'POST', '/api/chronos/runs', run('r5'));
    expect(sixth.status).toBe(403);
    expect(await sixth.json()).toEqual({
      error:
        "Quota exceeded: Chronos scheduled runs: this account has 5 and the request would make it 6, above the limit of 5. To stay within it, delete runs you no longer need (DELETE /api/chronos/runs/{id}); to raise it, ask the platform's operator (BERTH_QUOTA_CHRONOS_RUNS for every account, PATCH /admin/accounts/{id}/quotas for one).",
      code: 'quota_exceeded',
    });
    expect(await runCount(a)).toBe(5);
    // No pending fire was stored for it either: one per stored run (a run's row is its pending fire).
    const fires = await sql<{ n: number }>(
      api.db.url,
      `SELECT count(*)::int AS n FROM chronos_runs WHERE account_id = $1 AND next_fire_at IS NOT NULL`,
      [a.id],
    );
    expect(fires[0]!.n).toBe(5);
    const quotas = await (await call(a.global, 'GET', '/api/quotas')).json();
    expect(quotas.chronos_runs).toEqual({ limit: 5, usage: 5 });
    // Deleting one makes room for one.
    const list = await (await call(a.global, 'GET', '/api/chronos/runs')).json();
    expect((await call(a.global, 'DELETE', `/api/chronos/runs/${list.data[0].id}`)).status).toBe(200);
    expect((await call(a.inference, 'POST', '/api/chronos/runs', run('r5'))).status).toBe(201);
  });

  it('40 creations at once against an override of 12: exactly 12 are stored', async () => {
    const a = await chronosAccount();
    const patch = await api.admin(`/admin/accounts/${a.id}/quotas`, {
      method: 'PATCH',
      body: JSON.stringify({ chronos_runs: 12 }),
    });
    expect(patch.status).toBe(200);
    expect(await patch.json()).toMatchObject({
      limits: { chronos_runs: 12 },
      overrides: { chronos_runs: 12 },
      defaults: { chronos_runs: 5 },
    });
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) => call(a.inference, 'POST', '/api/chronos/runs', run(`burst-${i}`))),
    );
    const statuses = answers.map((r) => r.status).sort();
    expect(statuses.filter((s) => s === 201)).toHaveLength(12);
    expect(statuses.filter((s) => s === 403)).toHaveLength(28);
    expect(await runCount(a)).toBe(12);
    // Back to the default (null): 12 runs are kept, none more may be created.
    const reset = await api.admin(`/admin/accounts/${a.id}/quotas`, {
      method: 'PATCH',
      body: JSON.stringify({ chronos_runs: null }),
    });
    expect((await reset.json()).limits.chronos_runs).toBe(5);
    expect((await call(a.inference, 'POST', '/api/chronos/runs', run('more'))).status).toBe(403);
    expect(await runCount(a)).toBe(12);
  });

  it('the override is validated like the others', async () => {
    const a = await chronosAccount();
    const bad = await api.admin(`/admin/accounts/${a.id}/quotas`, {
      method: 'PATCH',
      body: JSON.stringify({ chronos_runs: 0 }),
    });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({
      error: 'Invalid request body: chronos_runs: must be at least 1, or null for the default',
      code: 'validation_error',
    });
  });
});

describe('GET /api/chronos/runs, a page at a time', () => {
  it('limit and after walk every run once, oldest first; bad limit or after: 400 naming it', async () => {
    const a = await chronosAccount();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++)
      ids.push((await (await call(a.inference, 'POST', '/api/chronos/runs', run(`p${i}`))).json()).id);
    const seen: string[] = [];
    let after: string | null = null;
    const pages: boolean[] = [];
    do {
      const r = await call(a.global, 'GET', `/api/chronos/runs?limit=2${after ? `&after=${after}` : ''}`);
      expect(r.status).toBe(200);
      const page = await r.json();
      expect(page.object).toBe('list');
      expect(page.first_id).toBe(page.data[0]?.id ?? null);
      expect(page.last_id).toBe(page.data.at(-1)?.id ?? null);
      seen.push(...page.data.map((x: { id: string }) => x.id));
      pages.push(page.has_more);
      after = page.has_more ? page.last_id : null;
    } while (after);
    expect(seen).toEqual(ids);
    expect(pages).toEqual([true, true, false]);
    for (const [query, message] of [
      ['limit=0', 'Invalid query: limit: must be between 1 and 100'],
      ['limit=101', 'Invalid query: limit: must be between 1 and 100'],
      ['after=chr_nope', 'Invalid query: after: no Chronos run chr_nope in this account'],
    ] as const) {
      const r = await call(a.global, 'GET', `/api/chronos/runs?${query}`);
      expect(r.status, query).toBe(400);
      expect(await r.json()).toEqual({ error: message, code: 'validation_error' });
    }
    // Another account's run id is not a cursor here.
    const b = await chronosAccount();
    const r = await call(b.global, 'GET', `/api/chronos/runs?after=${ids[0]}`);
    expect(r.status).toBe(400);
  });

  it('a schedule is stored trimmed (a trailing newline is not kept)', async () => {
    const a = await chronosAccount();
    const r = await call(a.inference, 'POST', '/api/chronos/runs', run('trimmed', '  0 3 * * *\n'));
    expect(r.status).toBe(201);
    const { id } = await r.json();
    const [row] = await sql<{ schedule: string }>(
      api.db.url,
      'SELECT schedule FROM chronos_runs WHERE id = $1',
      [id],
    );
    expect(row!.schedule).toBe('0 3 * * *');
  });
});

describe('a run belongs to the account, not to the key that created it', () => {
  it('after that key is revoked, the run is listed with its key_id, fires on schedule, and is charged as before', async () => {
    const a = await chronosAccount();
    const credit = await api.admin(`/admin/accounts/${a.id}/credits`, {
      method: 'POST',
      body: JSON.stringify({ amount: '1.00' }),
      headers: { 'idempotency-key': randomUUID() },
    });
    expect(credit.status).toBe(201);
    const made = await call(a.global, 'POST', '/api/keys', { name: 'creator', scope: 'inference' });
    const creator = (await made.json()) as { id: string; value: string };
    const created = await call(creator.value, 'POST', '/api/chronos/runs', run('kept'));
    expect(created.status).toBe(201);
    const { id, key_id } = await created.json();
    expect(key_id).toBe(creator.id);

    expect((await call(a.global, 'DELETE', `/api/keys/${creator.id}`)).status).toBe(200);
    expect((await call(creator.value, 'GET', '/api/chronos/runs')).status).toBe(401);
    const listed = await (await call(a.global, 'GET', `/api/chronos/runs/${id}`)).json();
    expect(listed).toMatchObject({ id, key_id: creator.id });

    // Its next fire, now.
    const due = await sql(
      api.db.url,
      `UPDATE chronos_runs SET next_fire_at = date_trunc('second', now()) WHERE id = $1 RETURNING id`,
      [id],
    );
    expect(due).toHaveLength(1);
    const execution = await eventually(
      async () => {
        const r = await call(a.global, 'GET', `/api/chronos/runs/${id}/executions`);
        const e = ((await r.json()) as { data: { status: string; trigger: string }[] }).data[0];
        return (e?.status === 'succeeded' || e?.status === 'failed') && e;
      },
      { timeout: 30_000, interval: 200, description: 'the execution ended' },
    );
    expect(execution).toMatchObject({ status: 'succeeded', trigger: 'schedule' });
    // Usage is recorded under the key that created it, as for any of its executions.
    await eventually(
      async () =>
        (
          await sql(
            api.db.url,
            `SELECT 1 FROM metered_usage WHERE account_id = $1 AND key_id = $2 AND model = 'main'`,
            [a.id, creator.id],
          )
        ).length === 1,
      { timeout: 10_000, description: 'usage under the creating key' },
    );
  });
});
