// Two API processes on one database: a key revoked through one is refused by the other at once,
// even though the other had it cached.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, spawnApi, type ApiProcess } from '@berth/test/support/api';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';

const ADMIN = 'two-process-admin-token-xyz';
let db: TestDatabase;
let a: ApiProcess;
let b: ApiProcess;

beforeAll(async () => {
  db = await createTestDatabase('revocation');
  const env = { DATABASE_URL: db.url, ADMIN_TOKEN: ADMIN, REVOCATION_ACK_TIMEOUT_MS: '5000' };
  a = await spawnApi(env);
  b = await spawnApi(env);
}, 120_000);

afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop()]);
  await db?.drop();
});

async function cacheHits(api: ApiProcess): Promise<number> {
  const text = await (await fetch(api.url + '/metrics')).text();
  return Number(/^berth_key_cache_lookups_total\{result="hit"\} (\d+)/m.exec(text)?.[1] ?? 0);
}

describe('revocation across API replicas', () => {
  it('a key cached on replica B is refused by B as soon as DELETE on replica A returns', async () => {
    const signup = await fetch(a.url + '/admin/accounts', {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: '{}',
    });
    const { account, key } = await signup.json();
    const global = await (
      await fetch(`${a.url}/admin/accounts/${account.id}/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'admin', scope: 'global' }),
      })
    ).json();

    // Warm B's cache: the second call is served without the database.
    const hitsBefore = await cacheHits(b);
    for (let i = 0; i < 2; i++)
      expect((await fetch(b.url + '/api/models', { headers: bearer(key.value) })).status).toBe(200);
    expect(await cacheHits(b)).toBe(hitsBefore + 1);

    const started = Date.now();
    const del = await fetch(`${a.url}/api/keys/${key.id}`, {
      method: 'DELETE',
      headers: bearer(global.value),
    });
    const took = Date.now() - started;
    expect(del.status).toBe(200);
    // Both replicas acknowledged well before the 5 s acknowledgement timeout.
    expect(took).toBeLessThan(4000);
    expect(await (await fetch(a.url + '/metrics')).text()).toMatch(
      /^berth_key_revocations_total\{outcome="confirmed"\} 1$/m,
    );

    const res = await fetch(b.url + '/api/models', { headers: bearer(key.value) });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({
      error: {
        message: 'Invalid API key',
        type: 'invalid_request_error',
        code: 'api_key_revoked',
        param: null,
      },
      message: 'Invalid API key',
    });
    expect(a.output() + b.output()).not.toContain(key.value);
    expect(a.output() + b.output()).not.toContain(global.value);
  });

  it('stops gracefully on SIGTERM', async () => {
    const c = await spawnApi({ DATABASE_URL: db.url, ADMIN_TOKEN: ADMIN });
    expect(await c.stop()).toBe(0);
    expect(c.output()).toContain('Berth API stopped');
  });

  it('refuses to start with bad configuration and says what to fix', async () => {
    await expect(spawnApi({ DATABASE_URL: db.url, ADMIN_TOKEN: 'short' })).rejects.toThrow(
      /exited with 78[\s\S]*ADMIN_TOKEN: must be at least 16 characters/,
    );
  });
});
