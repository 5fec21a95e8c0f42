// Per-account quotas on API keys, and GET /api/keys a page at a time: on real PostgreSQL, through HTTP,
// with concurrent creations racing for the last places of a quota.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { sql } from '@berth/test/support/postgres';

// newAccount() gives an account 3 active keys (default, compute, global), made by the admin: with
// a quota of 8, 5 places are left.
const KEY_QUOTA = 8;

let api: TestApi;
beforeAll(async () => {
  api = await startTestApi({ BERTH_QUOTA_KEYS: String(KEY_QUOTA) });
});
afterAll(async () => api?.stop());

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });
const createKey = (key: string, name: string) =>
  fetch(api.url + '/api/keys', {
    method: 'POST',
    headers: json(key),
    body: JSON.stringify({ name, scope: 'inference' }),
  });
const keyRows = async (accountId: string) =>
  (
    await sql<{ n: number; active: number }>(
      api.db.url,
      'SELECT count(*)::int AS n, count(*) FILTER (WHERE revoked_at IS NULL)::int AS active FROM api_keys WHERE account_id = $1',
      [accountId],
    )
  )[0]!;
const quotaMessage = (usage: number, limit = KEY_QUOTA) =>
  `Quota exceeded: active API keys: this account has ${usage} and the request would make it ${usage + 1}, above the limit of ${limit}. To stay within it, revoke keys you no longer use (DELETE /api/keys/{id}); to raise it, ask the platform's operator (BERTH_QUOTA_KEYS for every account, PATCH /admin/accounts/{id}/quotas for one).`;

describe('key quota (BERTH_QUOTA_KEYS)', () => {
  it('refuses the key past the quota with 403 quota_exceeded, creates nothing; revoking frees a place', async () => {
    const acct = await api.newAccount();
    for (let i = 0; i < 5; i++) expect((await createKey(acct.global, `k${i}`)).status).toBe(201);
    expect(await keyRows(acct.id)).toEqual({ n: 8, active: 8 });

    const refused = await createKey(acct.global, 'one too many');
    expect(refused.status).toBe(403);
    expect(refused.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await refused.json()).toEqual({ error: quotaMessage(8), code: 'quota_exceeded' });
    expect(await keyRows(acct.id)).toEqual({ n: 8, active: 8 });

    // Revoked keys do not count.
    const list = await (await fetch(api.url + '/api/keys', { headers: bearer(acct.global) })).json();
    const victim = list.data.find((k: { name: string }) => k.name === 'k0');
    expect(
      (await fetch(`${api.url}/api/keys/${victim.id}`, { method: 'DELETE', headers: bearer(acct.global) }))
        .status,
    ).toBe(200);
    expect((await createKey(acct.global, 'replacement')).status).toBe(201);
    expect(await keyRows(acct.id)).toEqual({ n: 9, active: 8 });
    expect((await createKey(acct.global, 'again too many')).status).toBe(403);
  });

  it('holds under concurrency: 20 simultaneous creations for 5 free places create exactly 5', async () => {
    const acct = await api.newAccount();
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        createKey(acct.global, `race-${i}`).then(async (r) => ({ status: r.status, body: await r.json() })),
      ),
    );
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(5);
    expect(statuses.filter((s) => s === 403)).toHaveLength(15);
    for (const a of answers.filter((x) => x.status === 403))
      expect(a.body).toEqual({ error: quotaMessage(8), code: 'quota_exceeded' });
    expect(await keyRows(acct.id)).toEqual({ n: 8, active: 8 });
  });

  it('is per account: a full account does not limit another', async () => {
    const full = await api.newAccount();
    const other = await api.newAccount();
    for (let i = 0; i < 5; i++) await createKey(full.global, `f${i}`);
    expect((await createKey(full.global, 'no')).status).toBe(403);
    expect((await createKey(other.global, 'yes')).status).toBe(201);
  });
});

describe('per-account overrides (PATCH /admin/accounts/{id}/quotas)', () => {
  const quotas = (id: string, body?: unknown) =>
    api.admin(`/admin/accounts/${id}/quotas`, {
      method: body === undefined ? 'GET' : 'PATCH',
      ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
    });
  const defaults = { keys: KEY_QUOTA, endpoints: 20, gpus: 64, chronos_runs: 100 };

  it("raises one account's key quota, and null gives the default back", async () => {
    const acct = await api.newAccount();
    const other = await api.newAccount();
    expect(await (await quotas(acct.id)).json()).toEqual({
      object: 'account_quotas',
      account: acct.id,
      limits: defaults,
      overrides: { keys: null, endpoints: null, gpus: null, chronos_runs: null },
      defaults,
    });
    const raised = await quotas(acct.id, { keys: 10 });
    expect(raised.status).toBe(200);
    expect(await raised.json()).toMatchObject({
      limits: { ...defaults, keys: 10 },
      overrides: { keys: 10, endpoints: null, gpus: null, chronos_runs: null },
    });
    for (let i = 0; i < 7; i++) expect((await createKey(acct.global, `r${i}`)).status).toBe(201);
    const refused = await createKey(acct.global, 'eleventh');
    expect(await refused.json()).toEqual({ error: quotaMessage(10, 10), code: 'quota_exceeded' });
    // The other account keeps the default.
    for (let i = 0; i < 5; i++) await createKey(other.global, `o${i}`);
    expect((await createKey(other.global, 'ninth')).status).toBe(403);

    // Lowered below what it has: the keys stay, new ones are refused.
    expect((await quotas(acct.id, { keys: 4 })).status).toBe(200);
    expect(await (await createKey(acct.global, 'x')).json()).toEqual({
      error: quotaMessage(10, 4),
      code: 'quota_exceeded',
    });
    expect((await keyRows(acct.id)).active).toBe(10);
    const reset = await (await quotas(acct.id, { keys: null })).json();
    expect(reset).toMatchObject({ limits: defaults, overrides: { keys: null } });

    // The account sees its limits and usage (GET /api/quotas); an inference key may not.
    expect((await quotas(acct.id, { keys: 12 })).status).toBe(200);
    const own = await fetch(`${api.url}/api/quotas`, { headers: bearer(acct.global) });
    expect(own.status).toBe(200);
    expect(await own.json()).toEqual({
      object: 'quotas',
      keys: { limit: 12, usage: 10 },
      endpoints: { limit: 20, usage: 0 },
      gpus: { limit: 64, usage: 0 },
      chronos_runs: { limit: 100, usage: 0 },
    });
    const inference = await fetch(`${api.url}/api/quotas`, { headers: bearer(acct.inference) });
    expect(inference.status).toBe(403);
  });

  it('bad bodies and unknown accounts change nothing', async () => {
    const acct = await api.newAccount();
    await quotas(acct.id, { gpus: 12 });
    const cases: [unknown, string][] = [
      [{ keys: 0 }, 'Invalid request body: keys: must be at least 1, or null for the default'],
      [{ keys: 2.5 }, 'Invalid request body: keys: must be a whole number, or null for the default'],
      [
        { endpoints: '5' },
        'Invalid request body: endpoints: must be a whole number, or null for the default',
      ],
      [{ gpus: 2_000_000 }, 'Invalid request body: gpus: must be at most 1000000'],
      [{ cpus: 4 }, 'Invalid request body: Unrecognized key: "cpus"'],
      [[], 'Invalid request body: Invalid input: expected object, received array'],
    ];
    for (const [body, message] of cases) {
      const r = await quotas(acct.id, body);
      expect({ body, status: r.status, answer: await r.json() }).toEqual({
        body,
        status: 400,
        answer: { error: message, code: 'validation_error' },
      });
    }
    expect((await (await quotas(acct.id)).json()).overrides).toEqual({
      keys: null,
      endpoints: null,
      gpus: 12,
      chronos_runs: null,
    });
    for (const r of [await quotas('acct_nope'), await quotas('acct_nope', { keys: 3 })]) {
      expect(r.status).toBe(404);
      expect(await r.json()).toEqual({ error: 'Account not found', code: 'not_found' });
    }
    // An account's key cannot reach the admin route.
    const denied = await fetch(`${api.url}/admin/accounts/${acct.id}/quotas`, {
      method: 'PATCH',
      headers: json(acct.global),
      body: JSON.stringify({ keys: 1000 }),
    });
    expect(denied.status).toBe(401);
  });
});

type KeyPage = {
  object: string;
  data: { id: string; name: string }[];
  has_more: boolean;
  first_id: string | null;
  last_id: string | null;
};

describe('GET /api/keys pages (limit, after)', () => {
  const listKeys = async (key: string, query = '') => {
    const res = await fetch(`${api.url}/api/keys${query}`, { headers: bearer(key) });
    return { status: res.status, body: await res.json() };
  };

  it('pages through every key once, oldest first, including keys created in the same instant', async () => {
    const acct = await api.newAccount();
    // The admin's creations are not limited by the quota: 22 keys, created concurrently (many share
    // a creation millisecond, so the order's tie-break is exercised), 25 in all.
    await Promise.all(
      Array.from({ length: 22 }, (_, i) =>
        api.admin(`/admin/accounts/${acct.id}/keys`, {
          method: 'POST',
          body: JSON.stringify({ name: `p${i}`, scope: 'inference' }),
        }),
      ),
    );
    const expected = (
      await sql<{ id: string }>(
        api.db.url,
        'SELECT id FROM api_keys WHERE account_id = $1 ORDER BY created_at, id',
        [acct.id],
      )
    ).map((r) => r.id);
    expect(expected).toHaveLength(25);

    // Without parameters: one page of up to 100, as before pagination (plus the list fields).
    const all = await listKeys(acct.global);
    expect(all.status).toBe(200);
    expect(all.body).toMatchObject({
      object: 'list',
      has_more: false,
      first_id: expected[0],
      last_id: expected[24],
    });
    expect(all.body.data.map((k: { id: string }) => k.id)).toEqual(expected);

    const seen: string[] = [];
    let after: string | null = null;
    let pages = 0;
    for (;;) {
      const page: { status: number; body: KeyPage } = await listKeys(
        acct.global,
        `?limit=7${after ? `&after=${after}` : ''}`,
      );
      expect(page.status).toBe(200);
      pages++;
      const ids = page.body.data.map((k) => k.id);
      expect(page.body.first_id).toBe(ids[0]);
      expect(page.body.last_id).toBe(ids.at(-1));
      seen.push(...ids);
      if (!page.body.has_more) break;
      expect(ids).toHaveLength(7);
      after = page.body.last_id;
    }
    expect(pages).toBe(4);
    expect(seen).toEqual(expected);

    // After the last key: an empty last page.
    expect((await listKeys(acct.global, `?after=${expected[24]}`)).body).toEqual({
      object: 'list',
      data: [],
      has_more: false,
      first_id: null,
      last_id: null,
    });
  });

  it('400 validation_error naming the field for a bad limit or after', async () => {
    const acct = await api.newAccount();
    const other = await api.newAccount();
    const otherKey = (await listKeys(other.global)).body.data[0].id;
    const cases: [string, string][] = [
      ['?limit=0', 'Invalid query: limit: must be between 1 and 100'],
      ['?limit=101', 'Invalid query: limit: must be between 1 and 100'],
      ['?limit=2.5', 'Invalid query: limit: must be a whole number'],
      ['?limit=ten', 'Invalid query: limit: must be a number'],
      ['?after=', 'Invalid query: after: must not be empty'],
      ['?after=key_nope', 'Invalid query: after: no key key_nope in this account'],
      // Another account's key is no cursor here (and says nothing about that account).
      [`?after=${otherKey}`, `Invalid query: after: no key ${otherKey} in this account`],
      ['?before=x', 'Invalid query: Unrecognized key: "before"'],
    ];
    for (const [query, message] of cases) {
      const r = await listKeys(acct.global, query);
      expect({ query, status: r.status, body: r.body }).toEqual({
        query,
        status: 400,
        body: { error: message, code: 'validation_error' },
      });
    }
  });
});
