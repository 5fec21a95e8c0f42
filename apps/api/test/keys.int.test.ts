import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { sql } from '@berth/test/support/postgres';

let api: TestApi;
beforeAll(async () => {
  api = await startTestApi({ KEY_TOUCH_INTERVAL_MS: '200' });
});
afterAll(async () => api?.stop());

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });

describe('key management (happy path)', () => {
  it('a global key creates, lists and revokes keys', async () => {
    const acct = await api.newAccount();
    const created = await fetch(api.url + '/api/keys', {
      method: 'POST',
      headers: json(acct.global),
      body: JSON.stringify({
        name: 'ci',
        scope: 'inference',
        pinnedModel: 'auto',
        toolPin: ['olympus'],
      }),
    });
    expect(created.status).toBe(201);
    const key = await created.json();
    expect(key).toMatchObject({
      id: expect.stringMatching(/^key_/),
      name: 'ci',
      scope: 'inference',
      pinnedModel: 'auto',
      toolPin: ['olympus'],
      state: 'active',
      value: expect.stringMatching(/^svc_live_[A-Za-z0-9]{33}$/),
      prefix: expect.stringMatching(/^svc_live_[A-Za-z0-9]{4}$/),
      lastUsedAt: null,
      revokedAt: null,
    });

    const list = await (await fetch(api.url + '/api/keys', { headers: bearer(acct.global) })).json();
    expect(list.data.map((k: { name: string }) => k.name)).toEqual(['default', 'compute', 'global', 'ci']);
    const text = JSON.stringify(list);
    expect(text).not.toContain(key.value);
    expect(text).not.toContain(acct.inference);
    expect(text).not.toMatch(/"hash"|"value"/);

    const del = await fetch(`${api.url}/api/keys/${key.id}`, {
      method: 'DELETE',
      headers: bearer(acct.global),
    });
    expect(del.status).toBe(200);
    expect(await del.json()).toMatchObject({ id: key.id, state: 'revoked', revokedAt: expect.any(String) });
    const after = await (await fetch(api.url + '/api/keys', { headers: bearer(acct.global) })).json();
    expect(after.data.find((k: { id: string }) => k.id === key.id).state).toBe('revoked');
  });

  it('records when a key was last used, without a write per request', async () => {
    const acct = await api.newAccount();
    for (let i = 0; i < 3; i++) await fetch(api.url + '/api/models', { headers: bearer(acct.inference) });
    await api.keys.flush();
    const list = await (await fetch(api.url + '/api/keys', { headers: bearer(acct.global) })).json();
    const def = list.data.find((k: { name: string }) => k.name === 'default');
    expect(Date.parse(def.lastUsedAt)).toBeGreaterThan(Date.now() - 60_000);
    expect(list.data.find((k: { name: string }) => k.name === 'compute').lastUsedAt).toBeNull();
  });
});

describe('key management (errors)', () => {
  it('needs a global key: 403 names the scope needed', async () => {
    const acct = await api.newAccount();
    for (const key of [acct.inference, acct.compute]) {
      const res = await fetch(api.url + '/api/keys', { headers: bearer(key) });
      expect(res.status).toBe(403);
      expect((await res.json()).error).toMatch(
        /^This API key has scope "(inference|compute)"; this route needs a key with scope "global"$/,
      );
    }
  });

  it('401 without a key, with a malformed one, with an unknown one', async () => {
    const none = await fetch(api.url + '/api/keys');
    expect(none.status).toBe(401);
    expect(await none.json()).toEqual({
      error: 'Missing or invalid Authorization header',
      code: 'missing_authorization',
    });
    for (const header of ['Bearer svc_live_short', `Bearer svc_live_${'A'.repeat(33)}`]) {
      const res = await fetch(api.url + '/api/keys', { headers: { authorization: header } });
      expect(res.status).toBe(401);
      expect(await res.json()).toEqual({ error: 'Invalid API key', code: 'invalid_api_key' });
    }
  });

  it("404 for a key id that is unknown or another account's, which stays active", async () => {
    const a = await api.newAccount();
    const b = await api.newAccount();
    const bKeys = await (await fetch(api.url + '/api/keys', { headers: bearer(b.global) })).json();
    const bDefault = bKeys.data.find((k: { name: string }) => k.name === 'default');
    for (const id of ['key_doesnotexist', bDefault.id]) {
      const res = await fetch(`${api.url}/api/keys/${id}`, { method: 'DELETE', headers: bearer(a.global) });
      expect(res.status).toBe(404);
      expect(await res.json()).toEqual({ error: 'API key not found', code: 'not_found' });
    }
    expect((await fetch(api.url + '/api/models', { headers: bearer(b.inference) })).status).toBe(200);
  });

  it('concurrent revocations of one key agree on one revocation time', async () => {
    const acct = await api.newAccount();
    const { id } = await (
      await fetch(api.url + '/api/keys', {
        method: 'POST',
        headers: json(acct.global),
        body: JSON.stringify({ name: 'x', scope: 'compute' }),
      })
    ).json();
    const results = await Promise.all(
      Array.from({ length: 8 }, () =>
        fetch(`${api.url}/api/keys/${id}`, { method: 'DELETE', headers: bearer(acct.global) }),
      ),
    );
    const bodies = await Promise.all(results.map((r) => r.json()));
    expect(results.map((r) => r.status)).toEqual(Array(8).fill(200));
    expect(new Set(bodies.map((b) => b.revokedAt)).size).toBe(1);
  });

  it('a revoked global key can no longer manage keys, including itself', async () => {
    const acct = await api.newAccount();
    const list = await (await fetch(api.url + '/api/keys', { headers: bearer(acct.global) })).json();
    const self = list.data.find((k: { name: string }) => k.name === 'global');
    expect(
      (await fetch(`${api.url}/api/keys/${self.id}`, { method: 'DELETE', headers: bearer(acct.global) }))
        .status,
    ).toBe(200);
    const res = await fetch(api.url + '/api/keys', { headers: bearer(acct.global) });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'Invalid API key', code: 'api_key_revoked' });
  });

  it('bad bodies write nothing', async () => {
    const acct = await api.newAccount();
    const keyCount = async () =>
      (await sql<{ n: number }>(api.db.url, 'SELECT count(*)::int AS n FROM api_keys'))[0]!.n;
    const before = await keyCount();
    for (const body of [
      '{',
      JSON.stringify({ scope: 'global' }),
      JSON.stringify({ name: 'x', scope: 'compute', pinnedModel: 'm' }),
    ]) {
      const res = await fetch(api.url + '/api/keys', { method: 'POST', headers: json(acct.global), body });
      expect(res.status).toBe(400);
    }
    expect(await keyCount()).toBe(before);
  });
});
