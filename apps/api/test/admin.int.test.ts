import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, startTestApi, type TestApi } from '@berth/test/support/api';
import { sql } from '@berth/test/support/postgres';

let api: TestApi;
beforeAll(async () => {
  api = await startTestApi();
});
afterAll(async () => api?.stop());

async function count(table: 'accounts' | 'api_keys'): Promise<number> {
  const rows = await sql<{ n: number }>(api.db.url, `SELECT count(*)::int AS n FROM ${table}`);
  return rows[0]!.n;
}

describe('POST /admin/accounts (signup)', () => {
  it('creates the account and its default inference key, shown once', async () => {
    const res = await api.admin('/admin/accounts', {
      method: 'POST',
      body: JSON.stringify({ name: 'Acme' }),
    });
    expect(res.status).toBe(201);
    const body = await res.json();
    expect(body.account).toMatchObject({ id: expect.stringMatching(/^acct_/), name: 'Acme' });
    expect(body.key).toMatchObject({
      id: expect.stringMatching(/^key_/),
      name: 'default',
      scope: 'inference',
      state: 'active',
      prefix: body.key.value.slice(0, 13),
      value: expect.stringMatching(/^svc_live_[A-Za-z0-9]{33}$/),
    });
    expect(body.key.value).toHaveLength(42);
  });

  it('accepts an empty body', async () => {
    const res = await api.admin('/admin/accounts', { method: 'POST' });
    expect(res.status).toBe(201);
  });

  it('stores only a hash of the key, never the value', async () => {
    const res = await api.admin('/admin/accounts', { method: 'POST', body: '{}' });
    const { key } = await res.json();
    const rows = await sql(api.db.url, 'SELECT * FROM api_keys WHERE id = $1', [key.id]);
    expect(rows).toHaveLength(1);
    expect(JSON.stringify(rows[0])).not.toContain(key.value.slice(13));
    expect(rows[0]!.hash).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe('POST /admin/accounts/{id}/keys', () => {
  it('creates a key of any scope for the account', async () => {
    const { account } = await (await api.admin('/admin/accounts', { method: 'POST', body: '{}' })).json();
    for (const scope of ['inference', 'compute', 'global']) {
      const res = await api.admin(`/admin/accounts/${account.id}/keys`, {
        method: 'POST',
        body: JSON.stringify({ name: `k-${scope}`, scope }),
      });
      expect(res.status).toBe(201);
      expect(await res.json()).toMatchObject({
        scope,
        name: `k-${scope}`,
        value: expect.stringMatching(/^svc_live_/),
      });
    }
    const pinned = await api.admin(`/admin/accounts/${account.id}/keys`, {
      method: 'POST',
      body: JSON.stringify({ name: 'pinned', scope: 'inference', pinnedModel: 'auto' }),
    });
    expect(await pinned.json()).toMatchObject({ pinnedModel: 'auto' });
  });

  it('404 for an unknown account, and nothing is written', async () => {
    const before = await count('api_keys');
    const res = await api.admin('/admin/accounts/acct_nope/keys', {
      method: 'POST',
      body: JSON.stringify({ name: 'x', scope: 'global' }),
    });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: 'Account not found', code: 'not_found' });
    expect(await count('api_keys')).toBe(before);
  });
});

describe('admin authentication and bad input', () => {
  it('401 without the admin token, with a wrong one, or with an API key', async () => {
    const none = await fetch(api.url + '/admin/accounts', { method: 'POST' });
    expect(none.status).toBe(401);
    expect(await none.json()).toEqual({
      error: 'Missing or invalid Authorization header',
      code: 'missing_authorization',
    });

    const wrong = await fetch(api.url + '/admin/accounts', {
      method: 'POST',
      headers: { authorization: 'Bearer not-the-admin-token-at-all' },
    });
    expect(wrong.status).toBe(401);
    expect(await wrong.json()).toEqual({ error: 'Invalid admin token', code: 'invalid_admin_token' });

    const acct = await api.newAccount();
    const key = await fetch(api.url + '/admin/accounts', {
      method: 'POST',
      headers: { authorization: `Bearer ${acct.global}` },
    });
    expect(key.status).toBe(401);
  });

  it('each bad body is a clear 4xx and writes nothing', async () => {
    const { account } = await (await api.admin('/admin/accounts', { method: 'POST', body: '{}' })).json();
    const accounts = await count('accounts');
    const keys = await count('api_keys');
    const cases: [RequestInit, number, string][] = [
      [{ body: '{"name": "x", "scope": ' }, 400, 'Malformed JSON in request body'],
      [
        { body: 'name=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } },
        415,
        'Content-Type must be application/json',
      ],
      [
        { body: JSON.stringify({ name: 'x'.repeat(2_000_000), scope: 'global' }) },
        413,
        'Request body too large',
      ],
      [
        { body: JSON.stringify({ name: 'x', scope: 'admin' }) },
        400,
        'Invalid request body: scope: must be one of "inference", "compute", "global"',
      ],
      [
        { body: JSON.stringify({ name: 42, scope: 'global' }) },
        400,
        'Invalid request body: name: Invalid input: expected string, received number',
      ],
      [
        { body: JSON.stringify({ name: '', scope: 'global' }) },
        400,
        'Invalid request body: name: must not be empty',
      ],
      [
        { body: JSON.stringify({ name: 'x', scope: 'global', extra: 1 }) },
        400,
        'Invalid request body: Unrecognized key: "extra"',
      ],
      [
        { body: JSON.stringify({ name: 'x', scope: 'global', pinnedModel: 'm' }) },
        400,
        'Invalid request body: pinnedModel: is only allowed on keys with scope "inference"',
      ],
      [
        { body: JSON.stringify({ name: 'x', scope: 'inference', toolPin: ['Bad Tool'] }) },
        400,
        'Invalid request body: toolPin.0: must be a tool id such as "olympus"',
      ],
      [
        { body: JSON.stringify(['x']) },
        400,
        'Invalid request body: Invalid input: expected object, received array',
      ],
      [{}, 400, 'The request body must be a JSON object'],
    ];
    for (const [init, status, message] of cases) {
      const res = await api.admin(`/admin/accounts/${account.id}/keys`, { method: 'POST', ...init });
      expect(res.status, message).toBe(status);
      expect(await res.json(), message).toMatchObject({ error: message });
      expect(res.headers.get('x-request-id')).toBeTruthy();
    }
    expect(await count('accounts')).toBe(accounts);
    expect(await count('api_keys')).toBe(keys);
  });
});

describe('GET /admin/accounts', () => {
  const admin = (query: string, token = ADMIN_TOKEN) =>
    fetch(`${api.url}/admin/accounts${query}`, { headers: { authorization: `Bearer ${token}` } });

  it('pages oldest first and searches by name, case-insensitively', async () => {
    const tag = `acme-${Date.now()}`;
    const made: string[] = [];
    for (const n of [1, 2, 3])
      made.push((await api.keys.createAccount(`${tag.toUpperCase()} team ${n}`)).account.id);
    await api.keys.createAccount('someone else');

    const first = await (await admin(`?name=${tag}&limit=2`)).json();
    expect(first.data.map((a: { id: string }) => a.id)).toEqual(made.slice(0, 2));
    expect(first.data[0]).toEqual({
      id: made[0],
      name: `${tag.toUpperCase()} team 1`,
      createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    });
    expect(first).toMatchObject({ hasMore: true, next: made[1] });
    const second = await (await admin(`?name=${tag}&limit=2&after=${first.next}`)).json();
    expect(second).toEqual({ data: [expect.objectContaining({ id: made[2] })], hasMore: false, next: null });

    const all = await (await admin('')).json();
    expect(all.data.length).toBeGreaterThanOrEqual(5);
  });

  it('refuses bad queries with the parameter named, and a bad admin token', async () => {
    for (const [q, message] of [
      ['?limit=0', 'Invalid query: limit: must be between 1 and 100'],
      ['?limit=x', 'Invalid query: limit: must be a number'],
      ['?after=acct_nope', 'Invalid query: after: no account acct_nope'],
    ] as const) {
      const res = await admin(q);
      expect(res.status).toBe(400);
      expect((await res.json()).error).toBe(message);
    }
    expect((await admin('?bogus=1')).status).toBe(400);
    expect((await admin('', 'wrong-token-0123456789')).status).toBe(401);
  });
});
