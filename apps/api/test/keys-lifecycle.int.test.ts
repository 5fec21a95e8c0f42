// Keys that rotate, expire and cap spend (issue 32), on two API processes sharing one database: a
// rotated key works through its grace period and is refused on every replica within a second after
// it (`api_key_rotated`), an expiring key likewise (`api_key_expired`); a key's spend limit holds
// across both replicas (402 `spend_limit_reached`, the account's balance untouched), and a change
// made on one replica applies on the other at once. Writes that can never work are refused.
import { randomUUID } from 'node:crypto';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, spawnApi, type ApiProcess } from '@berth/test/support/api';
import { createTestDatabase, sql, type TestDatabase } from '@berth/test/support/postgres';

const ADMIN = 'keys-lifecycle-admin-token';
let db: TestDatabase;
let a: ApiProcess;
let b: ApiProcess;
let sim: Awaited<ReturnType<typeof startEngineSim>>;

beforeAll(async () => {
  db = await createTestDatabase('keys_lifecycle');
  sim = await startEngineSim({ model: 'org/m', ttftMs: 0, itlMs: 0, outputTokens: 4 });
  const env = {
    DATABASE_URL: db.url,
    ADMIN_TOKEN: ADMIN,
    BILLING_FLUSH_INTERVAL_MS: '200',
    BILLING_SETTLE_WAIT_MS: '200',
  };
  [a, b] = await Promise.all([spawnApi(env), spawnApi(env)]);
  const model = await admin(a, '/admin/models/m', 'PUT', {
    kind: 'chat',
    backends: [{ baseUrl: sim.url + '/v1', model: 'org/m' }],
    // 100 µ per token, so a few calls reach a limit of a few cents.
    pricing: { inputPerMTok: '100.00', outputPerMTok: '100.00' },
  });
  expect(model.status).toBe(201);
  await admin(a, '/admin/models/embed', 'PUT', {
    kind: 'embedding',
    backends: [{ baseUrl: sim.url + '/v1', model: 'org/m' }],
    pricing: { inputPerMTok: '1.00', outputPerMTok: '1.00' },
  });
}, 120_000);

afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop()]);
  await sim?.close();
  await db?.drop();
});

function admin(api: ApiProcess, path: string, method: string, body: unknown, headers = {}) {
  return fetch(api.url + path, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

/** An account credited $10, and a global key to manage its keys. */
async function account(): Promise<{ id: string; global: string; inference: string }> {
  const made = await (await admin(a, '/admin/accounts', 'POST', { name: 'lifecycle' })).json();
  const global = await (
    await admin(a, `/admin/accounts/${made.account.id}/keys`, 'POST', { name: 'admin', scope: 'global' })
  ).json();
  const credit = await admin(
    a,
    `/admin/accounts/${made.account.id}/credits`,
    'POST',
    { amount: '10.00' },
    {
      'idempotency-key': randomUUID(),
    },
  );
  expect(credit.status).toBe(201);
  return { id: made.account.id, global: global.value, inference: made.key.value };
}

const keysApi = (api: ApiProcess, global: string, path: string, method: string, body?: unknown) =>
  fetch(`${api.url}/api/keys${path}`, {
    method,
    headers: { ...bearer(global), 'content-type': 'application/json' },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });

const models = (api: ApiProcess, key: string) => fetch(api.url + '/api/models', { headers: bearer(key) });

const chat = (api: ApiProcess, key: string) =>
  fetch(api.url + '/api/chat/completions', {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
  });

/** Polls until `key` is refused on `api`; the time it first was, and the body. */
async function refusedAt(api: ApiProcess, key: string): Promise<{ at: number; body: unknown }> {
  for (;;) {
    const res = await models(api, key);
    if (res.status === 401) return { at: Date.now(), body: await res.json() };
    await res.arrayBuffer();
    await new Promise((r) => setTimeout(r, 20));
  }
}

const refusal = (code: string) => ({
  error: { message: 'Invalid API key', type: 'invalid_request_error', code, param: null },
  message: 'Invalid API key',
});

describe('rotation across replicas', () => {
  it('the old key works until graceExpiresAt, then every replica refuses it within a second', async () => {
    const acct = await account();
    const made = await (await keysApi(a, acct.global, '', 'POST', { name: 'ci', scope: 'inference' })).json();
    for (const api of [a, b]) expect((await models(api, made.value)).status).toBe(200); // cached on both
    const rotated = await keysApi(a, acct.global, `/${made.id}/rotate`, 'POST', { gracePeriodSeconds: 2 });
    expect(rotated.status).toBe(201);
    const r = await rotated.json();
    expect(r).toMatchObject({
      name: 'ci',
      scope: 'inference',
      state: 'active',
      rotatedFrom: made.id,
      value: expect.stringMatching(/^svc_live_/),
      previous: { id: made.id, state: 'active', replacedBy: r.id },
    });
    const graceEnds = Date.parse(r.previous.graceExpiresAt);
    expect(graceEnds - Date.now()).toBeGreaterThan(1_000);
    for (const api of [a, b]) {
      expect((await models(api, made.value)).status).toBe(200);
      expect((await models(api, r.value)).status).toBe(200);
    }
    const [onA, onB] = await Promise.all([refusedAt(a, made.value), refusedAt(b, made.value)]);
    for (const x of [onA, onB]) {
      expect(x.at).toBeGreaterThanOrEqual(graceEnds);
      expect(x.at - graceEnds).toBeLessThan(1_000);
      expect(x.body).toEqual(refusal('api_key_rotated'));
    }
    for (const api of [a, b]) expect((await models(api, r.value)).status).toBe(200);
    const listed = await (await keysApi(b, acct.global, `/${made.id}`, 'GET')).json();
    expect(listed).toMatchObject({ state: 'rotated', replacedBy: r.id });
    // Rotated once: the old key cannot be rotated again.
    const again = await keysApi(b, acct.global, `/${made.id}/rotate`, 'POST', {});
    expect(again.status).toBe(409);
    expect(await again.json()).toEqual({
      error: `API key ${made.id} was already rotated (replaced by ${r.id}); rotate that key instead`,
      code: 'key_conflict',
    });
  });

  it('a grace of 0: refused on both replicas as soon as the rotation returns', async () => {
    const acct = await account();
    const made = await (await keysApi(a, acct.global, '', 'POST', { name: 'k', scope: 'inference' })).json();
    for (const api of [a, b]) expect((await models(api, made.value)).status).toBe(200);
    const r = await (
      await keysApi(b, acct.global, `/${made.id}/rotate`, 'POST', { gracePeriodSeconds: 0 })
    ).json();
    for (const api of [a, b]) {
      const res = await models(api, made.value);
      expect(res.status).toBe(401);
      expect(await res.json()).toEqual(refusal('api_key_rotated'));
      expect((await models(api, r.value)).status).toBe(200);
    }
  });

  it('default grace 24 h; more than 30 days is refused, naming the field; nothing changes', async () => {
    const acct = await account();
    const made = await (await keysApi(a, acct.global, '', 'POST', { name: 'k', scope: 'inference' })).json();
    const bad = await keysApi(a, acct.global, `/${made.id}/rotate`, 'POST', {
      gracePeriodSeconds: 2_592_001,
    });
    expect(bad.status).toBe(400);
    expect((await bad.json()).error).toBe(
      'Invalid request body: gracePeriodSeconds: must be at most 2592000 (30 days)',
    );
    expect(await sql(db.url, 'SELECT replaced_by FROM api_keys WHERE id = $1', [made.id])).toEqual([
      { replaced_by: null },
    ]);
    const r = await (await keysApi(a, acct.global, `/${made.id}/rotate`, 'POST', {})).json();
    const grace = Date.parse(r.previous.graceExpiresAt) - Date.now();
    expect(grace).toBeGreaterThan(86_400_000 - 60_000);
    expect(grace).toBeLessThanOrEqual(86_400_000);
  });
});

describe('expiry across replicas', () => {
  it('a key is refused with api_key_expired on both replicas within a second of expiresAt', async () => {
    const acct = await account();
    const expiresAt = new Date(Date.now() + 2_000).toISOString();
    const made = await (
      await keysApi(a, acct.global, '', 'POST', { name: 'short', scope: 'inference', expiresAt })
    ).json();
    expect(made.expiresAt).toBe(expiresAt);
    for (const api of [a, b]) expect((await models(api, made.value)).status).toBe(200);
    const [onA, onB] = await Promise.all([refusedAt(a, made.value), refusedAt(b, made.value)]);
    for (const x of [onA, onB]) {
      expect(x.at).toBeGreaterThanOrEqual(Date.parse(expiresAt));
      expect(x.at - Date.parse(expiresAt)).toBeLessThan(1_000);
      expect(x.body).toEqual(refusal('api_key_expired'));
    }
    const past = await keysApi(a, acct.global, '', 'POST', {
      name: 'x',
      scope: 'inference',
      expiresAt: new Date(Date.now() - 1_000).toISOString(),
    });
    expect(past.status).toBe(400);
    expect((await past.json()).error).toMatch(/^Invalid request body: expiresAt: must be in the future/);
  });
});

describe('spend limits across replicas', () => {
  it('402 spend_limit_reached on either replica once the key reached it; the account and its other keys go on', async () => {
    const acct = await account();
    const made = await keysApi(a, acct.global, '', 'POST', {
      name: 'capped',
      scope: 'inference',
      spendLimit: { amount: '0.05', period: 'day' },
    });
    expect(made.status).toBe(201);
    const key = await made.json();
    expect(key.spendLimit).toMatchObject({ amount: '0.050000', period: 'day', spent: '0.000000' });
    let answered = 0;
    let refused: Response | undefined;
    for (let i = 0; i < 100 && !refused; i++) {
      const res = await chat(i % 2 ? b : a, key.value);
      if (res.status === 402) refused = res;
      else {
        expect(res.status).toBe(200);
        await res.arrayBuffer();
        answered++;
      }
    }
    expect(answered).toBeGreaterThan(2);
    const body = await refused!.json();
    expect(body.error).toMatchObject({
      type: 'insufficient_quota',
      code: 'spend_limit_reached',
      spend_limit: { key: key.id, amount: '0.050000', period: 'day', currency: 'USD' },
    });
    expect(body.error.message).toMatch(
      /^This API key has reached its spend limit \(0\.050000 USD per day; 0\.\d{6} spent, 0\.\d{6} held by calls in flight\); it resets at \d{4}-\d\d-\d\dT00:00:00\.000Z\. Raise or remove the limit in Settings → Keys$/,
    );
    expect(body.message).toBe(body.error.message);
    // The other replica refuses it too, and the account's default key spends on.
    expect((await chat(a, key.value)).status).toBe(402);
    expect((await chat(b, key.value)).status).toBe(402);
    const other = await chat(b, acct.inference);
    expect(other.status).toBe(200);
    await other.arrayBuffer();
    await new Promise((r) => setTimeout(r, 600)); // both replicas flushed
    const [spent] = await sql<{ spent: string }>(
      db.url,
      'SELECT spent::text FROM key_spend WHERE lineage = $1',
      [key.id],
    );
    expect(BigInt(spent!.spent)).toBeLessThanOrEqual(50_000n);
    const [bal] = await sql<{ balance: string; charged: string }>(
      db.url,
      `SELECT b.balance::text, (SELECT -SUM(amount) FROM ledger_entries WHERE account_id = $1 AND kind = 'charge')::text AS charged
       FROM billing_accounts b WHERE account_id = $1`,
      [acct.id],
    );
    expect(BigInt(bal!.balance)).toBe(10_000_000n - BigInt(bal!.charged));
    const shown = await (await keysApi(b, acct.global, `/${key.id}`, 'GET')).json();
    expect(shown.spendLimit.spent).toBe((Number(spent!.spent) / 1e6).toFixed(6));

    // Raised on replica A: replica B lets the key spend again at once.
    const raised = await keysApi(a, acct.global, `/${key.id}`, 'PATCH', {
      spendLimit: { amount: '1.00', period: 'day' },
    });
    expect(raised.status).toBe(200);
    const again = await chat(b, key.value);
    expect(again.status).toBe(200);
    await again.arrayBuffer();
    // Removed: no limit at all.
    expect((await keysApi(b, acct.global, `/${key.id}`, 'PATCH', { spendLimit: null })).status).toBe(200);
    expect((await (await keysApi(a, acct.global, `/${key.id}`, 'GET')).json()).spendLimit).toBeNull();
  });
});

describe('writes that can never work are refused, naming the field', () => {
  it('a pinned model nothing serves, an embedding model, a bad limit: 400, nothing written', async () => {
    const acct = await account();
    const before = await sql(db.url, 'SELECT id FROM api_keys WHERE account_id = $1 ORDER BY id', [acct.id]);
    const cases: [unknown, string][] = [
      [
        { name: 'x', scope: 'inference', pinnedModel: 'nope' },
        'Invalid request body: pinnedModel: no catalog model or dedicated endpoint named nope (GET /api/models lists the catalog)',
      ],
      [
        { name: 'x', scope: 'inference', pinnedModel: 'endpt-someone-elses' },
        'Invalid request body: pinnedModel: no dedicated endpoint endpt-someone-elses in this account',
      ],
      [
        { name: 'x', scope: 'inference', pinnedModel: 'embed' },
        'Invalid request body: pinnedModel: embed is an embedding model; /api/b/chat/completions needs a chat model',
      ],
      [
        { name: 'x', scope: 'inference', spendLimit: { amount: '1.00', period: 'year' } },
        'Invalid request body: spendLimit.period: must be "day", "week" or "month"',
      ],
    ];
    for (const [body, error] of cases) {
      const res = await keysApi(b, acct.global, '', 'POST', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect((await res.json()).error).toBe(error);
    }
    const k = await (
      await keysApi(a, acct.global, '', 'POST', { name: 'p', scope: 'inference', pinnedModel: 'm' })
    ).json();
    const patch = await keysApi(b, acct.global, `/${k.id}`, 'PATCH', { pinnedModel: 'nope' });
    expect(patch.status).toBe(400);
    expect((await (await keysApi(a, acct.global, `/${k.id}`, 'GET')).json()).pinnedModel).toBe('m');
    const after = await sql(
      db.url,
      'SELECT id FROM api_keys WHERE account_id = $1 AND id <> $2 ORDER BY id',
      [acct.id, k.id],
    );
    expect(after).toEqual(before);
  });
});
