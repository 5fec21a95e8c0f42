// PostgreSQL down under Elastic traffic (issue 36): calls go on while the replica's lease is valid
// (before 2026-11-28 none did: losing the key revocation listener made billing forget every key);
// once it can no longer be renewed they answer 503 `Service temporarily unavailable` in the dual
// shape (the OpenAI SDKs retry it) — never 500 — and billing logs the outage once, not per call;
// when the database is back, so are the calls, and it says so once.
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { startEngineSim } from '@berth/engine-sim';
import { parseConfig, startApi, type RunningApi } from '@berth/api';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, bearer } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';
import { tcpProxy, throughProxy, type TcpProxy } from '@berth/test/support/tcp-proxy';

let db: TestDatabase;
let proxy: TcpProxy;
let api: RunningApi;
let sim: Awaited<ReturnType<typeof startEngineSim>>;
const lines: { level: number; msg: string }[] = [];

beforeAll(async () => {
  sim = await startEngineSim({ model: 'org/m', ttftMs: 0, itlMs: 0, outputTokens: 4 });
  db = await createTestDatabase('billing_outage');
  proxy = await tcpProxy({ host: new URL(db.url).hostname, port: Number(new URL(db.url).port) });
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(l));
      done();
    },
  });
  api = await startApi(
    parseConfig({
      PORT: '0',
      DATABASE_URL: throughProxy(db.url, proxy),
      ADMIN_TOKEN,
      BILLING_FLUSH_INTERVAL_MS: '500',
      BILLING_LEASE_TTL_MS: '5000',
    }),
    { logger: pino({ level: 'info' }, sink) },
  );
}, 60_000);

afterAll(async () => {
  await api?.close();
  await proxy?.close();
  await db?.drop();
  await sim?.close();
});

const admin = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(api.url + path, {
    method: path.startsWith('/admin/models') ? 'PUT' : 'POST',
    headers: { ...bearer(ADMIN_TOKEN), 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });

describe('the database lost under Elastic traffic', () => {
  it('calls answer 503 in the dual shape once the lease cannot be renewed, logged once; back after', async () => {
    const pricing = { inputPerMTok: '1.00', outputPerMTok: '1.00' };
    const backends = [{ baseUrl: sim.url + '/v1', model: 'org/m' }];
    expect((await admin('/admin/models/m', { kind: 'chat', backends, pricing })).status).toBe(201);
    const made = await (await admin('/admin/accounts', { name: 'outage' })).json();
    const credit = await admin(
      `/admin/accounts/${made.account.id}/credits`,
      { amount: '5.00' },
      {
        'idempotency-key': randomUUID(),
      },
    );
    expect(credit.status).toBe(201);
    const call = () =>
      fetch(api.url + '/api/chat/completions', {
        method: 'POST',
        headers: { ...bearer(made.key.value), 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 4 }),
      });
    expect((await call()).status).toBe(200); // the lease is taken

    proxy.cut();
    const cutAt = Date.now();
    // While the lease lasts the calls go on; then 503 — and nothing else — for every call.
    const statuses: { status: number; at: number }[] = [];
    let first503: Response | undefined;
    while (Date.now() - cutAt < 9_000) {
      const res = await call();
      statuses.push({ status: res.status, at: Date.now() - cutAt });
      if (res.status === 503 && !first503) first503 = res;
      else await res.arrayBuffer();
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(statuses.filter((s) => s.status !== 200 && s.status !== 503)).toEqual([]);
    // Served from the lease first (the key's limit and the account's slice known to the replica:
    // losing the notification listeners forgets neither), all of them in the lease's time …
    const served = statuses.filter((s) => s.status === 200);
    expect(served.length).toBeGreaterThan(5);
    expect(statuses.slice(0, served.length).every((s) => s.status === 200)).toBe(true);
    expect(Math.max(...served.map((s) => s.at))).toBeLessThan(5_000);
    // … then the lease cannot be renewed: 503 for every call.
    expect(statuses.filter((s) => s.status === 503).length).toBeGreaterThan(20);
    expect(first503!.headers.get('retry-after')).toBe('5');
    expect(await first503!.json()).toEqual({
      error: {
        message: 'Service temporarily unavailable',
        type: 'api_error',
        code: 'service_unavailable',
        param: null,
      },
      message: 'Service temporarily unavailable',
    });
    const outage = lines.filter((l) => l.msg.startsWith('billing cannot reach the database'));
    expect(outage.length).toBe(1);
    // Nothing per call: no 'unexpected failure' stack, no 'database unavailable' per request; each
    // component says once that it lost its connection — the job queue too, whose polls fail several
    // times a second meanwhile.
    const times = new Map<string, number>();
    for (const l of lines) if (l.level >= 40) times.set(l.msg, (times.get(l.msg) ?? 0) + 1);
    expect(times.get('unexpected failure')).toBeUndefined();
    expect(times.get('database unavailable')).toBeUndefined();
    expect([...times].filter(([, n]) => n > 1)).toEqual([]);

    proxy.restore();
    await eventually(async () => (await call()).status === 200, { timeout: 30_000, interval: 500 });
    expect(lines.filter((l) => l.msg === 'billing reaches the database again').length).toBe(1);
  }, 60_000);
});
