// /api/billing/* and the admin billing routes, through the real API on real PostgreSQL: happy
// paths, bad input that changes nothing, and who may see what.
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { errorBody, ApiError, familyOf } from '../src/platform/errors.ts';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { sql } from '@berth/test/support/postgres';

let api: TestApi;
beforeAll(async () => {
  api = await startTestApi({ BERTH_FREE_QUERIES: '7' });
});
afterAll(async () => api?.stop());

const query = <T extends pg.QueryResultRow>(text: string, values: unknown[] = []) =>
  sql<T>(api.db.url, text, values);

const credit = (accountId: string, body: unknown, key: string | null = randomUUID()) =>
  api.admin(`/admin/accounts/${accountId}/credits`, {
    method: 'POST',
    body: typeof body === 'string' ? body : JSON.stringify(body),
    headers: key === null ? {} : { 'idempotency-key': key },
  });

const get = (path: string, key: string) => fetch(api.url + path, { headers: bearer(key) });

async function snapshot(accountId: string) {
  const [entries] = await query<{ n: number }>(
    'SELECT count(*)::int AS n FROM ledger_entries WHERE account_id = $1',
    [accountId],
  );
  const [acct] = await query<{ balance: string }>(
    'SELECT balance::text FROM billing_accounts WHERE account_id = $1',
    [accountId],
  );
  return { entries: entries!.n, balance: acct?.balance ?? null };
}

describe('credits (happy path)', () => {
  it('credits the account: 201 with the entry and the new balance; the balance shows it', async () => {
    const acct = await api.newAccount();
    const before = await (await get('/api/billing/balance', acct.global)).json();
    expect(before).toEqual({ balance: '0.000000', currency: 'USD', paid: false, freeQueriesRemaining: 7 });

    const res = await credit(acct.id, { amount: '10.00', reference: 'wire 2026-11-23' });
    expect(res.status).toBe(201);
    const body = await res.json();
    expect(body).toEqual({
      entry: {
        id: expect.stringMatching(/^\d+$/),
        kind: 'credit',
        amount: '10.000000',
        balanceAfter: '10.000000',
        reference: 'wire 2026-11-23',
        createdAt: expect.any(String),
      },
      balance: '10.000000',
    });
    expect(await (await get('/api/billing/balance', acct.global)).json()).toEqual({
      balance: '10.000000',
      currency: 'USD',
      paid: true,
      freeQueriesRemaining: 0,
    });
  });

  it('the same Idempotency-Key twice credits once and returns the same entry', async () => {
    const acct = await api.newAccount();
    const key = `topup-${randomUUID()}`;
    const first = await credit(acct.id, { amount: '5.5' }, key);
    const again = await credit(acct.id, { amount: '5.5' }, key);
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(await again.json()).toEqual(await first.json());
    expect(await snapshot(acct.id)).toEqual({ entries: 1, balance: '5500000' });
  });

  it('ten concurrent replays of one key credit once', async () => {
    const acct = await api.newAccount();
    const key = randomUUID();
    const all = await Promise.all(Array.from({ length: 10 }, () => credit(acct.id, { amount: '1.25' }, key)));
    expect(all.map((r) => r.status)).toEqual(Array(10).fill(201));
    const ids = new Set(await Promise.all(all.map(async (r) => (await r.json()).entry.id)));
    expect(ids.size).toBe(1);
    expect(await snapshot(acct.id)).toEqual({ entries: 1, balance: '1250000' });
  });

  it('refunds and adjustments move the balance but do not make the account paid', async () => {
    const acct = await api.newAccount();
    const post = (body: unknown) =>
      api.admin(`/admin/accounts/${acct.id}/adjustments`, {
        method: 'POST',
        body: JSON.stringify(body),
        headers: { 'idempotency-key': randomUUID() },
      });
    expect((await post({ kind: 'adjustment', amount: '2.00', reference: 'goodwill' })).status).toBe(201);
    expect((await post({ kind: 'adjustment', amount: '-0.5', reference: 'correction' })).status).toBe(201);
    const r = await post({ kind: 'refund', amount: '0.25', reference: 'outage' });
    expect(await r.json()).toMatchObject({
      entry: { kind: 'refund', amount: '0.250000' },
      balance: '1.750000',
    });
    expect(await (await get('/api/billing/balance', acct.global)).json()).toMatchObject({
      balance: '1.750000',
      paid: false,
      freeQueriesRemaining: 7,
    });
  });
});

describe('spending, the ledger and usage', () => {
  it('calls settled through the wallet show up as one charge, usage per model and day, and the balance', async () => {
    const acct = await api.newAccount();
    await credit(acct.id, { amount: '10.00' });
    const { wallet } = api.billing;
    for (const [model, cost, prompt, completion] of [
      ['llama', 700n, 1000, 200],
      ['llama', 300n, 500, 100],
      ['qwen', 240n, 100, 80],
    ] as const) {
      const r = await wallet.reserve({ accountId: acct.id, amount: 1_000n });
      if (!r.ok) throw new Error('refused');
      r.hold.settle(cost, { keyId: 'key_x', model, promptTokens: prompt, completionTokens: completion });
    }
    await wallet.flush();
    expect(await (await get('/api/billing/balance', acct.global)).json()).toMatchObject({
      balance: '9.998760',
    });

    const ledger = await (await get('/api/billing/ledger', acct.global)).json();
    expect(ledger.data.map((e: { kind: string; amount: string }) => [e.kind, e.amount])).toEqual([
      ['charge', '-0.001240'],
      ['credit', '10.000000'],
    ]);
    expect(ledger.data[0]).toMatchObject({ balanceAfter: '9.998760', reference: '3 calls' });
    expect(ledger.nextBefore).toBeNull();

    const today = new Date().toISOString().slice(0, 10);
    const usage = await (await get('/api/billing/usage', acct.global)).json();
    expect(usage).toMatchObject({ to: today, currency: 'USD' });
    expect(usage.data).toEqual([
      {
        day: today,
        model: 'llama',
        requests: 2,
        freeRequests: 0,
        promptTokens: 1500,
        completionTokens: 300,
        cost: '0.001000',
      },
      {
        day: today,
        model: 'qwen',
        requests: 1,
        freeRequests: 0,
        promptTokens: 100,
        completionTokens: 80,
        cost: '0.000240',
      },
    ]);
  });

  it('pages the ledger and filters it by kind and time', async () => {
    const acct = await api.newAccount();
    for (const amount of ['1', '2', '3']) await credit(acct.id, { amount });
    await api.admin(`/admin/accounts/${acct.id}/adjustments`, {
      method: 'POST',
      body: JSON.stringify({ kind: 'adjustment', amount: '-1', reference: 'fix' }),
      headers: { 'idempotency-key': randomUUID() },
    });
    const page1 = await (await get('/api/billing/ledger?limit=2', acct.global)).json();
    expect(page1.data.map((e: { amount: string }) => e.amount)).toEqual(['-1.000000', '3.000000']);
    const page2 = await (
      await get(`/api/billing/ledger?limit=2&before=${page1.nextBefore}`, acct.global)
    ).json();
    expect(page2.data.map((e: { amount: string }) => e.amount)).toEqual(['2.000000', '1.000000']);
    expect(page2.nextBefore).toBeNull();
    const credits = await (await get('/api/billing/ledger?kind=credit', acct.global)).json();
    expect(credits.data).toHaveLength(3);
    const both = await (await get('/api/billing/ledger?kind=credit,adjustment', acct.global)).json();
    expect(both.data).toHaveLength(4);
    const future = await (await get('/api/billing/ledger?from=2099-01-01T00:00:00Z', acct.global)).json();
    expect(future.data).toEqual([]);
    const past = await (await get('/api/billing/ledger?to=2000-01-01T00:00:00Z', acct.global)).json();
    expect(past.data).toEqual([]);
  });
});

describe('invoices', () => {
  it('lists issued weekly invoices with the running week as upcoming, and shows one by id', async () => {
    const acct = await api.newAccount();
    const { gpu } = api.billing;
    const lastMonday = new Date(Math.floor(Date.now() / 86_400_000) * 86_400_000);
    while (lastMonday.getUTCDay() !== 1) lastMonday.setTime(lastMonday.getTime() - 86_400_000);
    const twoWeeksAgo = lastMonday.getTime() - 14 * 86_400_000;
    const ep = {
      endpointId: `endpt-${acct.id.slice(5, 13).toLowerCase()}`,
      accountId: acct.id,
      instanceType: 'nvidia-h100-80gb',
      gpusPerReplica: 2,
    };
    await gpu.observe({ ...ep, replicas: 1, at: new Date(twoWeeksAgo + 3_600_000) });
    await gpu.observe({ ...ep, replicas: 0, at: new Date(twoWeeksAgo + 3 * 3_600_000) });
    const run = await api.admin('/admin/billing/invoices/run', { method: 'POST' });
    expect(run.status).toBe(200);
    expect((await run.json()).invoices).toBeGreaterThanOrEqual(1);

    const list = await (await get('/api/billing/invoices', acct.global)).json();
    expect(list.data).toEqual([
      {
        id: expect.stringMatching(/^inv_/),
        status: 'issued',
        periodStart: new Date(twoWeeksAgo).toISOString(),
        periodEnd: new Date(twoWeeksAgo + 7 * 86_400_000).toISOString(),
        currency: 'USD',
        total: '10.000000', // 2 h × 2 GPUs at $2.50
        issuedAt: expect.any(String),
      },
    ]);
    expect(list.upcoming).toMatchObject({
      status: 'upcoming',
      periodStart: lastMonday.toISOString(),
      total: '0.000000',
      lines: [],
    });
    const one = await (await get(`/api/billing/invoices/${list.data[0].id}`, acct.global)).json();
    expect(one.lines).toEqual([
      {
        endpointId: ep.endpointId,
        instanceType: 'nvidia-h100-80gb',
        gpuType: 'NVIDIA H100 80GB',
        gpuCount: 2,
        hours: '2.000000',
        gpuHours: '4.000000',
        ratePerGpuHour: '2.500000',
        amount: '10.000000',
      },
    ]);
    // The same through the admin routes.
    const admin = await (await api.admin(`/admin/accounts/${acct.id}/billing/invoices/${one.id}`)).json();
    expect(admin).toEqual(one);
    // Another account cannot see it.
    const other = await api.newAccount();
    const res = await get(`/api/billing/invoices/${one.id}`, other.global);
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: 'Invoice not found', code: 'not_found' });
  });
});

describe('admin views and reconciliation', () => {
  it('shows any account the operator names; 404 for an unknown one', async () => {
    const acct = await api.newAccount();
    await credit(acct.id, { amount: '3' });
    expect(await (await api.admin(`/admin/accounts/${acct.id}/billing/balance`)).json()).toEqual({
      balance: '3.000000',
      currency: 'USD',
      paid: true,
      freeQueriesRemaining: 0,
    });
    const ledger = await (await api.admin(`/admin/accounts/${acct.id}/billing/ledger?kind=credit`)).json();
    expect(ledger.data).toHaveLength(1);
    expect((await api.admin(`/admin/accounts/${acct.id}/billing/usage`)).status).toBe(200);
    for (const view of ['balance', 'ledger', 'usage', 'invoices']) {
      const res = await api.admin(`/admin/accounts/acct_nobody/billing/${view}`);
      expect(res.status, view).toBe(404);
      expect(await res.json()).toEqual({ error: 'Account not found', code: 'not_found' });
    }
  });

  it('the reconciliation check passes, and names an account whose balance does not match its ledger', async () => {
    const ok = await (await api.admin('/admin/billing/reconciliation')).json();
    expect(ok).toMatchObject({ ok: true, mismatches: [] });
    expect(ok.accounts).toBeGreaterThan(0);
    const acct = await api.newAccount();
    await credit(acct.id, { amount: '1' });
    // The ledger itself refuses changes…
    for (const change of [
      'UPDATE ledger_entries SET amount = amount + 1 WHERE account_id = $1',
      'DELETE FROM ledger_entries WHERE account_id = $1',
    ])
      await expect(query(change, [acct.id]), change).rejects.toThrow(/ledger_entries is append-only/);
    await expect(query('TRUNCATE ledger_entries')).rejects.toThrow(/append-only/);
    // …so tamper with the balance behind its back.
    await query('UPDATE billing_accounts SET balance = balance + 1 WHERE account_id = $1', [acct.id]);
    const bad = await (await api.admin('/admin/billing/reconciliation')).json();
    expect(bad.ok).toBe(false);
    expect(bad.mismatches).toEqual([
      {
        accountId: acct.id,
        balance: '1.000001',
        ledgerTotal: '1.000000',
        lastBalanceAfter: '1.000000',
        leased: '0.000000',
        leaseTotal: '0.000000',
      },
    ]);
    await query('UPDATE billing_accounts SET balance = balance - 1 WHERE account_id = $1', [acct.id]);
  });
});

describe('bad input changes nothing', () => {
  it.each([
    [
      'no Idempotency-Key',
      { amount: '1' },
      null,
      'The Idempotency-Key header is required: 1 to 200 visible ASCII characters',
    ],
    [
      'a number',
      { amount: 10 },
      'k1',
      'Invalid request body: amount: must be a positive decimal string with at most 6 decimals, e.g. "10.00"',
    ],
    [
      'seven decimals',
      { amount: '1.0000001' },
      'k2',
      'Invalid request body: amount: must be a positive decimal string with at most 6 decimals, e.g. "10.00"',
    ],
    [
      'zero',
      { amount: '0.00' },
      'k3',
      'Invalid request body: amount: must be a positive decimal string with at most 6 decimals, e.g. "10.00"',
    ],
    [
      'negative',
      { amount: '-5' },
      'k4',
      'Invalid request body: amount: must be a positive decimal string with at most 6 decimals, e.g. "10.00"',
    ],
    [
      'an exponent',
      { amount: '1e3' },
      'k5',
      'Invalid request body: amount: must be a positive decimal string with at most 6 decimals, e.g. "10.00"',
    ],
    [
      'an unknown field',
      { amount: '1', currency: 'EUR' },
      'k6',
      'Invalid request body: Unrecognized key: "currency"',
    ],
    [
      'an empty reference',
      { amount: '1', reference: ' ' },
      'k7',
      'Invalid request body: reference: must not be empty',
    ],
    ['malformed JSON', '{"amount": "1"', 'k8', 'Malformed JSON in request body'],
    ['no body', undefined, 'k9', 'The request body must be a JSON object'],
  ])('%s → 400, nothing written', async (_what, body, key, message) => {
    const acct = await api.newAccount();
    await credit(acct.id, { amount: '2' });
    const before = await snapshot(acct.id);
    const res =
      body === undefined
        ? await api.admin(`/admin/accounts/${acct.id}/credits`, {
            method: 'POST',
            headers: { 'idempotency-key': key! },
          })
        : await credit(acct.id, body, key);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: message });
    expect(await snapshot(acct.id)).toEqual(before);
  });

  it('an oversized body: 413, nothing credited', async () => {
    const acct = await api.newAccount();
    const res = await credit(acct.id, { amount: '1', reference: 'x'.repeat(1_100_000) });
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ error: 'Request body too large', code: 'request_too_large' });
    expect(await snapshot(acct.id)).toEqual({ entries: 0, balance: null });
  });

  it('an Idempotency-Key reused with another amount: 409, nothing credited', async () => {
    const acct = await api.newAccount();
    const key = randomUUID();
    await credit(acct.id, { amount: '1' }, key);
    const before = await snapshot(acct.id);
    const res = await credit(acct.id, { amount: '100' }, key);
    expect(res.status).toBe(409);
    expect(await res.json()).toEqual({
      error: 'This Idempotency-Key was already used with a different request',
      code: 'idempotency_conflict',
    });
    expect(await snapshot(acct.id)).toEqual(before);
  });

  it('an unknown account: 404, nothing written', async () => {
    const res = await credit('acct_doesnotexist', { amount: '1' });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: 'Account not found', code: 'not_found' });
    expect(await query(`SELECT 1 FROM billing_accounts WHERE account_id = 'acct_doesnotexist'`)).toEqual([]);
  });

  it('a negative adjustment larger than the balance: 409, nothing written', async () => {
    const acct = await api.newAccount();
    await credit(acct.id, { amount: '1' });
    const before = await snapshot(acct.id);
    const res = await api.admin(`/admin/accounts/${acct.id}/adjustments`, {
      method: 'POST',
      body: JSON.stringify({ kind: 'adjustment', amount: '-1.000001', reference: 'too much' }),
      headers: { 'idempotency-key': randomUUID() },
    });
    expect(res.status).toBe(409);
    expect(await res.json()).toEqual({
      error: 'The balance not held by calls in flight is 1.000000, too low for this adjustment',
      code: 'balance_conflict',
    });
    expect(await snapshot(acct.id)).toEqual(before);
  });

  it('a negative refund is refused', async () => {
    const acct = await api.newAccount();
    const res = await api.admin(`/admin/accounts/${acct.id}/adjustments`, {
      method: 'POST',
      body: JSON.stringify({ kind: 'refund', amount: '-1', reference: 'x' }),
      headers: { 'idempotency-key': randomUUID() },
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      error: 'Invalid request body: amount: a refund must be positive',
    });
  });

  it.each([
    [
      '/api/billing/ledger?kind=bogus',
      'Invalid query: kind.0: must be credit, charge, refund, adjustment (comma-separated)',
    ],
    ['/api/billing/ledger?limit=0', 'Invalid query: limit: must be between 1 and 200'],
    ['/api/billing/ledger?limit=many', 'Invalid query: limit: must be a number'],
    [
      '/api/billing/ledger?from=yesterday',
      'Invalid query: from: must be an ISO 8601 date-time, e.g. 2026-11-23T00:00:00Z',
    ],
    ['/api/billing/ledger?before=abc', 'Invalid query: before: must be an entry id from a previous page'],
    ['/api/billing/ledger?page=2', 'Invalid query: Unrecognized key: "page"'],
    ['/api/billing/usage?from=2026-11-30&to=2026-11-01', 'Invalid query: from: must not be after `to`'],
    [
      '/api/billing/usage?from=2020-01-01&to=2026-01-01',
      'Invalid query: from: the range may span at most 367 days',
    ],
    ['/api/billing/usage?to=30-11-2026', 'Invalid query: to: must be a date, YYYY-MM-DD'],
  ])('%s → 400 naming the parameter', async (path, message) => {
    const acct = await api.newAccount();
    const res = await get(path, acct.global);
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: message, code: 'validation_error' });
  });
});

describe('who may see billing', () => {
  it('needs a global key: inference and compute keys are refused, no key or a bad one is 401', async () => {
    const acct = await api.newAccount();
    for (const path of [
      '/api/billing/balance',
      '/api/billing/ledger',
      '/api/billing/usage',
      '/api/billing/invoices',
    ]) {
      for (const key of [acct.inference, acct.compute]) {
        const res = await get(path, key);
        expect(res.status, path).toBe(403);
        expect((await res.json()).code).toBe('insufficient_scope');
      }
      expect((await fetch(api.url + path)).status).toBe(401);
      expect((await get(path, 'svc_live_' + 'x'.repeat(33))).status).toBe(401);
    }
  });

  it('a revoked global key loses access at once', async () => {
    const acct = await api.newAccount();
    const list = await (await get('/api/keys', acct.global)).json();
    const globalKey = list.data.find((k: { scope: string }) => k.scope === 'global');
    await fetch(`${api.url}/api/keys/${globalKey.id}`, { method: 'DELETE', headers: bearer(acct.global) });
    const res = await get('/api/billing/balance', acct.global);
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'Invalid API key', code: 'api_key_revoked' });
  });

  it('each account sees only its own balance and ledger', async () => {
    const a = await api.newAccount();
    const b = await api.newAccount();
    await credit(a.id, { amount: '4' });
    expect((await (await get('/api/billing/balance', b.global)).json()).balance).toBe('0.000000');
    expect((await (await get('/api/billing/ledger', b.global)).json()).data).toEqual([]);
  });

  it('admin routes need the admin token', async () => {
    const acct = await api.newAccount();
    const res = await fetch(`${api.url}/admin/accounts/${acct.id}/credits`, {
      method: 'POST',
      headers: { ...bearer(acct.global), 'content-type': 'application/json', 'idempotency-key': 'x' },
      body: JSON.stringify({ amount: '1000' }),
    });
    expect(res.status).toBe(401);
    expect(await snapshot(acct.id)).toEqual({ entries: 0, balance: null });
    expect((await fetch(`${api.url}/admin/billing/reconciliation`)).status).toBe(401);
  });
});

describe('the OpenAPI document', () => {
  it('describes every billing route', async () => {
    const doc = await (await fetch(api.url + '/openapi.json')).json();
    for (const [path, method] of [
      ['/api/billing/balance', 'get'],
      ['/api/billing/ledger', 'get'],
      ['/api/billing/usage', 'get'],
      ['/api/billing/invoices', 'get'],
      ['/api/billing/invoices/{id}', 'get'],
      ['/admin/accounts/{id}/credits', 'post'],
      ['/admin/accounts/{id}/adjustments', 'post'],
      ['/admin/accounts/{id}/billing/ledger', 'get'],
      ['/admin/billing/reconciliation', 'get'],
    ] as const)
      expect(doc.paths[path]?.[method], `${method} ${path}`).toBeDefined();
    expect(
      doc.paths['/admin/accounts/{id}/credits'].post.requestBody.content['application/json'].schema,
    ).toMatchObject({
      properties: { amount: { type: 'string' } },
      required: ['amount'],
    });
  });
});

describe('402 Insufficient balance / payment required', () => {
  it('is one error code rendered in both shapes of spec §7', () => {
    const err = new ApiError('insufficient_balance');
    expect(err.status).toBe(402);
    expect(errorBody(err, familyOf('/api/chat/completions'))).toEqual({
      error: {
        message: 'Insufficient balance / payment required',
        type: 'insufficient_quota',
        code: 'insufficient_balance',
        param: null,
      },
      message: 'Insufficient balance / payment required',
    });
    expect(errorBody(err, familyOf('/api/chronos/runs/run_1/trigger'))).toEqual({
      error: 'Insufficient balance / payment required',
      code: 'insufficient_balance',
    });
  });
});
