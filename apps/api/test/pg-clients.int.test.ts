// Two API replicas on one database under concurrent key revocations and catalog writes: no
// node-postgres client is ever handed a query while it is running one. node-postgres queues such a
// query and warns ("Calling client.query() when the client is already executing a query"); pg 9 makes
// it an error. A two-replica mixed load logged that warning once per replica: the LISTEN connections
// (key revocations, catalog changes) were also used to send, from request handlers and from the
// notification handler at once.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';

type Probe = { _queryQueue?: unknown[]; _getActiveQuery?: () => unknown };

const overlapping: string[] = [];
const warnings: string[] = [];
const query = pg.Client.prototype.query;
const onWarning = (w: Error) => warnings.push(w.message);
let db: TestDatabase;
let a: TestApi;
let b: TestApi;

beforeAll(async () => {
  // Every pg.Client in this process (the APIs', pg-boss's, Prisma's adapter's): a query given to a
  // client that has one running or queued is recorded with where it came from.
  pg.Client.prototype.query = function (this: pg.Client & Probe, ...args: unknown[]) {
    if ((this._queryQueue?.length ?? 0) > 0 || this._getActiveQuery?.())
      overlapping.push(new Error('a second query on a busy client').stack ?? '');
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  process.on('warning', onWarning);
  db = await createTestDatabase('pg_clients');
  a = await startTestApi({ REVOCATION_ACK_TIMEOUT_MS: '5000' }, db);
  b = await startTestApi({ REVOCATION_ACK_TIMEOUT_MS: '5000' }, db);
}, 120_000);

afterAll(async () => {
  await a?.stop();
  await b?.stop();
  await db?.drop();
  pg.Client.prototype.query = query;
  process.off('warning', onWarning);
});

const send = (api: TestApi, path: string, method: string, key: string, body?: unknown) =>
  fetch(api.url + path, {
    method,
    headers: { ...bearer(key), 'content-type': 'application/json' },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });

describe('node-postgres clients under two replicas', () => {
  it('40 revocations and 20 catalog writes at once, half on each replica: each client runs one query at a time', async () => {
    const acct = await a.newAccount();
    const keys: { id: string; value: string }[] = [];
    for (let i = 0; i < 40; i++) {
      const r = await send(a, '/api/keys', 'POST', acct.global, { name: `k${i}`, scope: 'inference' });
      expect(r.status).toBe(201);
      keys.push((await r.json()) as { id: string; value: string });
    }
    // Both replicas know every key (cached), so each revocation must reach both.
    for (const k of keys)
      for (const api of [a, b]) expect((await send(api, '/api/models', 'GET', k.value)).status).toBe(200);

    const revocations = keys.map((k, i) => send(i % 2 ? b : a, `/api/keys/${k.id}`, 'DELETE', acct.global));
    const writes = Array.from({ length: 20 }, (_, i) =>
      (i % 2 ? b : a).admin(`/admin/models/m${i}`, {
        method: 'PUT',
        body: JSON.stringify({
          kind: 'chat',
          backends: [{ baseUrl: 'http://127.0.0.1:9/v1', model: `org/m${i}` }],
          pricing: { inputPerMTok: '0.10', outputPerMTok: '0.20' },
        }),
      }),
    );
    const answers = await Promise.all([...revocations, ...writes]);
    expect(answers.map((r) => r.status)).toEqual([...keys.map(() => 200), ...writes.map(() => 201)]);
    // Every revocation confirmed by both replicas (none waited out its acknowledgement timeout).
    for (const api of [a, b]) {
      const metrics = await (await fetch(api.url + '/metrics')).text();
      expect(metrics).toMatch(/^berth_key_revocations_total\{outcome="confirmed"\} 20$/m);
    }
    for (const k of keys)
      for (const api of [a, b]) expect((await send(api, '/api/models', 'GET', k.value)).status).toBe(401);

    expect(overlapping).toEqual([]);
    expect(warnings.filter((w) => w.includes('already executing a query'))).toEqual([]);
  }, 120_000);
});
