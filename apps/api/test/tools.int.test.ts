// The tool catalog (/admin/tools) and per-account enablement (/api/tools) on real PostgreSQL,
// and toolAccess(), the one rule managed loops, Olympus and Chronos ask.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { sql } from '@berth/test/support/postgres';
import { toolRepository } from '../src/tools/repository.ts';
import { toolAccess } from '../src/tools/access.ts';
import { openDatabase } from '@berth/db';

const SECRETS_KEY = 'a'.repeat(64);
let api: TestApi;
beforeAll(async () => {
  api = await startTestApi({ BERTH_SECRETS_KEY: SECRETS_KEY });
});
afterAll(async () => api?.stop());

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });
const weather = {
  description: 'Weather by city',
  url: 'http://127.0.0.1:9/mcp',
  headers: { Authorization: 'Bearer mcp-secret-123', 'X-Team': 'berth' },
  price_per_call: '0.002',
};
const putTool = (id: string, body: unknown) =>
  api.admin(`/admin/tools/${id}`, { method: 'PUT', body: JSON.stringify(body) });
const enable = (key: string, body: unknown) =>
  fetch(api.url + '/api/tools', { method: 'POST', headers: json(key), body: JSON.stringify(body) });
const list = async (key: string) => {
  const r = await fetch(api.url + '/api/tools', { headers: bearer(key) });
  expect(r.status).toBe(200);
  return ((await r.json()) as { data: { tool_id: string; enabled: boolean }[] }).data;
};

describe('admin: the tool catalog', () => {
  it('registers (201), replaces (200), shows header names only, seals the values at rest', async () => {
    const created = await putTool('weather', weather);
    expect(created.status).toBe(201);
    const body = await created.json();
    expect(body).toMatchObject({
      tool_id: 'weather',
      kind: 'mcp',
      url: weather.url,
      header_names: ['Authorization', 'X-Team'],
      price_per_call: '0.002000',
      timeout_ms: 30000,
    });
    expect(JSON.stringify(body)).not.toContain('mcp-secret-123');
    const [row] = await sql(
      api.db.url,
      `SELECT headers_sealed, price_per_call FROM tools WHERE id = 'weather'`,
    );
    expect(row?.headers_sealed).toMatch(/^v1\./);
    expect(row?.headers_sealed).not.toContain('mcp-secret');
    expect(String(row?.price_per_call)).toBe('2000');

    const replaced = await putTool('weather', { ...weather, price_per_call: '0.001', timeout_ms: 5000 });
    expect(replaced.status).toBe(200);
    expect(await replaced.json()).toMatchObject({ price_per_call: '0.001000', timeout_ms: 5000 });
    const got = await (await api.admin('/admin/tools/weather')).json();
    expect(got.price_per_call).toBe('0.001000');
    const all = await (await api.admin('/admin/tools')).json();
    expect(all.data.map((t: { tool_id: string }) => t.tool_id)).toEqual(['chronos', 'olympus', 'weather']);
  });

  it('refuses bad bodies and ids, naming the field, and writes nothing', async () => {
    const cases: [unknown, string][] = [
      [{ ...weather, url: 'ftp://x/mcp' }, 'Invalid request body: url: must be an http:// or https:// URL'],
      [
        { ...weather, price_per_call: 0.5 },
        `Invalid request body: price_per_call: must be a decimal string with at most 6 decimals, e.g. "0.002"`,
      ],
      [
        { ...weather, price_per_call: '0.0000001' },
        `Invalid request body: price_per_call: must be a decimal string with at most 6 decimals, e.g. "0.002"`,
      ],
      [{ ...weather, timeout_ms: 10 }, 'Invalid request body: timeout_ms: must be at least 100'],
      [{ ...weather, extra: 1 }, 'Invalid request body: Unrecognized key: "extra"'],
      [
        { url: weather.url, price_per_call: '1' },
        'Invalid request body: description: Invalid input: expected string, received undefined',
      ],
    ];
    for (const [body, message] of cases) {
      const r = await putTool('bad-tool', body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(await r.json()).toEqual({ error: message, code: 'validation_error' });
    }
    const badId = await putTool('Bad%20Id', weather);
    expect(badId.status).toBe(400);
    expect((await badId.json()).error).toBe('Invalid path: tool_id: must be a tool id such as "olympus"');
    const malformed = await api.admin('/admin/tools/bad-tool', { method: 'PUT', body: '{"description":' });
    expect(malformed.status).toBe(400);
    expect(await sql(api.db.url, `SELECT id FROM tools WHERE id = 'bad-tool'`)).toEqual([]);
  });

  it('keeps the built-in switches: PUT and DELETE of olympus/chronos are 409', async () => {
    for (const id of ['olympus', 'chronos']) {
      const put = await putTool(id, weather);
      expect(put.status).toBe(409);
      expect((await put.json()).code).toBe('builtin_tool');
      const del = await api.admin(`/admin/tools/${id}`, { method: 'DELETE' });
      expect(del.status).toBe(409);
    }
    const [row] = await sql(api.db.url, `SELECT kind, url FROM tools WHERE id = 'olympus'`);
    expect(row).toEqual({ kind: 'feature', url: null });
  });

  it('needs the admin token', async () => {
    const r = await fetch(api.url + '/admin/tools/weather', {
      method: 'PUT',
      headers: { authorization: 'Bearer wrong-token-0123456789', 'content-type': 'application/json' },
      body: JSON.stringify(weather),
    });
    expect(r.status).toBe(401);
    const acct = await api.newAccount();
    expect((await fetch(api.url + '/admin/tools', { headers: bearer(acct.global) })).status).toBe(401);
  });

  it('concurrent PUTs of one new id: one 201, the rest 200, one row', async () => {
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) => putTool('race', { ...weather, price_per_call: `0.00${i + 1}` })),
    );
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).toEqual([200, 200, 200, 200, 200, 201]);
    expect(await sql(api.db.url, `SELECT count(*)::int AS n FROM tools WHERE id = 'race'`)).toEqual([
      { n: 1 },
    ]);
  });
});

describe('accounts: enablement', () => {
  it('lists the catalog with enabled per account; POST is idempotent; DELETE disables', async () => {
    await putTool('search', { ...weather, description: 'Search', headers: undefined });
    const a = await api.newAccount();
    const b = await api.newAccount();
    expect((await list(a.inference)).every((t) => !t.enabled)).toBe(true);

    const first = await enable(a.global, { tool_id: 'search' });
    expect(first.status).toBe(200);
    const firstBody = await first.json();
    expect(firstBody).toMatchObject({
      tool_id: 'search',
      kind: 'mcp',
      enabled: true,
      price_per_call: '0.002000',
    });
    expect(firstBody).not.toHaveProperty('url');
    const again = await (await enable(a.global, { tool_id: 'search' })).json();
    expect(again.enabled_at).toBe(firstBody.enabled_at);
    expect((await enable(a.global, { tool_id: 'olympus' })).status).toBe(200);

    const seen = await list(a.inference);
    expect(seen.filter((t) => t.enabled).map((t) => t.tool_id)).toEqual(['olympus', 'search']);
    expect((await list(b.global)).some((t) => t.enabled)).toBe(false); // another account sees nothing of it

    const off = await fetch(`${api.url}/api/tools/search`, { method: 'DELETE', headers: bearer(a.global) });
    expect(off.status).toBe(200);
    expect(await off.json()).toMatchObject({ tool_id: 'search', enabled: false, enabled_at: null });
    const offAgain = await fetch(`${api.url}/api/tools/search`, {
      method: 'DELETE',
      headers: bearer(a.global),
    });
    expect(offAgain.status).toBe(200);
    expect((await list(a.global)).filter((t) => t.enabled).map((t) => t.tool_id)).toEqual(['olympus']);
  });

  it('unknown tool → 404 in the simple shape; bad bodies → 400; nothing written', async () => {
    const a = await api.newAccount();
    const unknown = await enable(a.global, { tool_id: 'nope' });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({ error: 'Tool "nope" not found', code: 'not_found' });
    const del = await fetch(`${api.url}/api/tools/nope`, { method: 'DELETE', headers: bearer(a.global) });
    expect(del.status).toBe(404);
    for (const [body, message] of [
      [{}, 'Invalid request body: tool_id: must be a string'],
      [{ tool_id: 7 }, 'Invalid request body: tool_id: must be a string'],
      [{ tool_id: 'olympus', x: 1 }, 'Invalid request body: Unrecognized key: "x"'],
      [[], 'Invalid request body: Invalid input: expected object, received array'],
    ] as const) {
      const r = await enable(a.global, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(await r.json()).toEqual({ error: message, code: 'validation_error' });
    }
    const malformed = await fetch(api.url + '/api/tools', {
      method: 'POST',
      headers: json(a.global),
      body: '{',
    });
    expect(malformed.status).toBe(400);
    expect(await sql(api.db.url, `SELECT * FROM tool_enablements WHERE account_id = '${a.id}'`)).toEqual([]);
  });

  it('scopes and keys: compute and inference keys cannot enable; revoked keys are refused', async () => {
    const a = await api.newAccount();
    for (const key of [a.inference, a.compute]) {
      const r = await enable(key, { tool_id: 'olympus' });
      expect(r.status).toBe(403);
      expect((await r.json()).code).toBe('insufficient_scope');
    }
    expect((await fetch(api.url + '/api/tools', { headers: bearer(a.compute) })).status).toBe(403);
    expect((await fetch(api.url + '/api/tools')).status).toBe(401);

    const created = await fetch(api.url + '/api/keys', {
      method: 'POST',
      headers: json(a.global),
      body: JSON.stringify({ name: 'tmp', scope: 'global' }),
    });
    const tmp = (await created.json()) as { id: string; value: string };
    await fetch(`${api.url}/api/keys/${tmp.id}`, { method: 'DELETE', headers: bearer(a.global) });
    const revoked = await enable(tmp.value, { tool_id: 'olympus' });
    expect(revoked.status).toBe(401);
    expect(await revoked.json()).toEqual({ error: 'Invalid API key', code: 'api_key_revoked' });
    expect(await sql(api.db.url, `SELECT * FROM tool_enablements WHERE account_id = '${a.id}'`)).toEqual([]);
  });

  it('removing a tool from the catalog removes every account’s enablement', async () => {
    await putTool('gone', { ...weather, headers: undefined });
    const a = await api.newAccount();
    await enable(a.global, { tool_id: 'gone' });
    const del = await api.admin('/admin/tools/gone', { method: 'DELETE' });
    expect(del.status).toBe(200);
    expect((await api.admin('/admin/tools/gone', { method: 'DELETE' })).status).toBe(404);
    expect(await sql(api.db.url, `SELECT * FROM tool_enablements WHERE tool_id = 'gone'`)).toEqual([]);
    expect((await list(a.global)).map((t) => t.tool_id)).not.toContain('gone');
  });
});

describe('toolAccess(): enabled for the account and allowed by the pin', () => {
  it('decides per tool, in the order asked', async () => {
    await putTool('calc', { ...weather, headers: undefined });
    const a = await api.newAccount();
    await enable(a.global, { tool_id: 'calc' });
    await enable(a.global, { tool_id: 'olympus' });
    const db = await openDatabase({ kind: 'postgres', url: api.db.url, poolSize: 1 });
    try {
      const repo = toolRepository(db.prisma);
      const at = (pin: string[], ids: string[]) => toolAccess(repo, { accountId: a.id, toolPin: pin }, ids);
      expect(await at([], ['calc', 'olympus'])).toMatchObject({
        ok: true,
        tools: [{ id: 'calc' }, { id: 'olympus' }],
      });
      expect(await at(['calc'], ['calc'])).toMatchObject({ ok: true });
      expect(await at(['calc'], ['olympus'])).toEqual({
        ok: false,
        denial: { toolId: 'olympus', reason: 'not_in_pin' },
      });
      expect(await at([], ['chronos'])).toEqual({
        ok: false,
        denial: { toolId: 'chronos', reason: 'not_enabled' },
      });
      expect(await at(['chronos'], ['chronos'])).toEqual({
        ok: false,
        denial: { toolId: 'chronos', reason: 'not_enabled' },
      });
      expect(await at([], ['calc', 'missing'])).toEqual({
        ok: false,
        denial: { toolId: 'missing', reason: 'unknown' },
      });
      const other = await api.newAccount();
      expect(await toolAccess(repo, { accountId: other.id, toolPin: [] }, ['calc'])).toEqual({
        ok: false,
        denial: { toolId: 'calc', reason: 'not_enabled' },
      });
    } finally {
      await db.close();
    }
  });
});

describe('without BERTH_SECRETS_KEY (DATABASE_URL set)', () => {
  it('tools with headers are refused with a message that says what to set; tools without are fine', async () => {
    const bare = await startTestApi();
    try {
      const r = await bare.admin('/admin/tools/weather', { method: 'PUT', body: JSON.stringify(weather) });
      expect(r.status).toBe(503);
      expect(await r.json()).toEqual({
        error: 'Secrets cannot be stored: set BERTH_SECRETS_KEY on the API (e.g. `openssl rand -hex 32`)',
        code: 'secrets_unavailable',
      });
      const ok = await bare.admin('/admin/tools/weather', {
        method: 'PUT',
        body: JSON.stringify({ ...weather, headers: undefined }),
      });
      expect(ok.status).toBe(201);
    } finally {
      await bare.stop();
    }
  });
});
