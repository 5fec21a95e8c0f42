// The dedicated proxy's fast path (routes/dedicated.ts, dedicatedFastPath): it takes the common
// `/api/d/<id>/…` request before Express (the API's request listener, app.ts requestListener, which
// this server uses as the API's does), and must answer exactly as the registered route does.
// Each request is sent twice to the same app: in its canonical spelling (the fast path takes it) and
// with a trailing slash (Express's non-strict matching gives it to the registered route; the fast
// path leaves it alone, as the dispatch test below shows). Status, error body and the headers a
// client reads must be the same. Real keys on PostgreSQL, a real engine simulator.
import { randomBytes } from 'node:crypto';
import { connect, type AddressInfo } from 'node:net';
import { createServer, type Server } from 'node:http';
import express from 'express';
import { openMigratedDatabase } from '@berth/db';
import { startEngineSim } from '@berth/engine-sim';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_CATALOG } from '@berth/crds';
import { createApp } from '../src/app.ts';
import { parseConfig } from '../src/platform/config.ts';
import { requestListener } from '../src/http/fast-entry.ts';
import { errorHandler } from '../src/http/middleware.ts';
import { keyHasher } from '../src/accounts/keys/format.ts';
import { localRevocationBus } from '../src/accounts/keys/revocation-bus.ts';
import { keyService, type KeyService } from '../src/accounts/keys/service.ts';
import { createMetrics, type ApiMetrics } from '../src/platform/metrics.ts';
import { proxyAgent } from '../src/dedicated/proxy/agent.ts';
import { memoryRateLimiter } from '../src/dedicated/proxy/ratelimit.ts';
import { usageRecorder } from '../src/dedicated/proxy/usage.ts';
import { keyRepository } from '../src/accounts/keys/repository.ts';
import { healthRepository } from '../src/platform/health-repository.ts';
import { usageRepository } from '../src/dedicated/proxy/usage-repository.ts';
import { type DedicatedDeps } from '../src/dedicated/call.ts';
import { dedicatedFastPath } from '../src/inference/fast-path.ts';
import { platformUpstream, type PlatformUpstream } from '../src/dedicated/upstream/endpoint-upstream.ts';
import {
  BENCH_ENDPOINT_ID as ID,
  memoryRuntime,
  type MemoryRuntime,
} from '@berth/test/support/memory-runtime';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';

const logger = pino({ level: 'silent' });
const MAX_BODY_BYTES = 4096;
let testDb: TestDatabase;
let db: Awaited<ReturnType<typeof openMigratedDatabase>>;
let keys: KeyService;
let runtime: MemoryRuntime;
let upstream: PlatformUpstream;
let deps: DedicatedDeps;
const dispatcher = proxyAgent();
let sim: Awaited<ReturnType<typeof startEngineSim>>;
let server: Server;
let base: string;
let owner: string;
let other: string;
let revoked: string;
let compute: string;
let metrics: ApiMetrics;

beforeAll(async () => {
  testDb = await createTestDatabase('fast_path');
  db = await openMigratedDatabase({ kind: 'postgres', url: testDb.url });
  keys = keyService({
    repo: keyRepository(db.prisma),
    hash: keyHasher(),
    bus: localRevocationBus(),
    touchIntervalMs: 60_000,
  });
  runtime = memoryRuntime();
  upstream = platformUpstream({ endpoints: runtime.endpoints, backends: runtime.backends, logger });
  sim = await startEngineSim({ model: 'berth/bench', ttftMs: 0, itlMs: 0, outputTokens: 4 });
  const endpoints = {
    runtime,
    upstream,
    dispatcher,
    usage: usageRecorder(usageRepository(db.prisma), logger, 60_000),
    limiter: memoryRateLimiter(),
  };
  const app = createApp({
    config: parseConfig({ MAX_BODY_BYTES: String(MAX_BODY_BYTES), PROXY_RETRIES: '0' }),
    adminToken: 'x'.repeat(20),
    keys,
    health: healthRepository(db.prisma),
    metrics: (metrics = createMetrics()),
    logger,
    lifecycle: { shuttingDown: false },
    catalog: DEFAULT_CATALOG,
    endpoints,
  });
  deps = {
    endpoints: runtime.endpoints,
    upstream,
    dispatcher,
    usage: endpoints.usage,
    limiter: endpoints.limiter,
    config: {
      wakeHoldMs: 1000,
      wakeHeartbeatMs: 5000,
      requestTimeoutMs: 10_000,
      retries: 0,
      publicLimitPerEndpoint: 600,
      publicLimitPerClient: 60,
    },
  };
  server = createServer(requestListener(app)).listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const a = await keys.createAccount('fast-path owner');
  owner = a.key.value;
  runtime.setEndpoint(a.account.id, 'up');
  runtime.setAddresses([sim.url]);
  other = (await keys.createAccount('fast-path other')).key.value;
  const r = await keys.createKey({ accountId: a.account.id, name: 'to revoke', scope: 'inference' });
  await keys.revoke(a.account.id, r.id);
  revoked = r.value;
  compute = (await keys.createKey({ accountId: a.account.id, name: 'compute', scope: 'compute' })).value;
});

afterAll(async () => {
  server?.close();
  await upstream?.close();
  await dispatcher.close();
  await sim?.close();
  await keys?.close();
  await db?.close();
  await testDb?.drop();
});

interface Answer {
  status: number;
  body: string;
  headers: Record<string, string | null>;
}

const SHOWN = ['content-type', 'retry-after', 'allow', 'www-authenticate'];

async function send(path: string, init: RequestInit): Promise<Answer> {
  const res = await fetch(base + path, init);
  const headers: Record<string, string | null> = {};
  for (const h of SHOWN) headers[h] = res.headers.get(h);
  return { status: res.status, body: await res.text(), headers };
}

/** The same request through the fast path and through the registered route: the two answers. */
async function both(id: string, route: string, init: RequestInit): Promise<[Answer, Answer]> {
  const fast = await send(`/api/d/${id}/${route}`, init);
  const routed = await send(`/api/d/${id}/${route}/`, init);
  return [fast, routed];
}

const chat = { model: 'berth/bench', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 };
const post = (key: string | undefined, body: string, type = 'application/json'): RequestInit => ({
  method: 'POST',
  headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), 'content-type': type },
  body,
});

describe('the fast path answers as the registered route does', () => {
  it.each([
    {
      what: 'an unknown endpoint',
      id: 'endpt-nosuch0001',
      init: () => post(owner, JSON.stringify(chat)),
      status: 404,
      error: { code: 'not_found', message: 'Dedicated endpoint endpt-nosuch0001 not found' },
    },
    {
      what: "another account's endpoint",
      id: ID,
      init: () => post(other, JSON.stringify(chat)),
      status: 403,
      error: { code: 'endpoint_access_denied', message: 'Forbidden: Access denied.' },
    },
    {
      what: 'a revoked key',
      id: ID,
      init: () => post(revoked, JSON.stringify(chat)),
      status: 401,
      error: { code: 'api_key_revoked', message: 'Invalid API key' },
    },
    {
      what: 'no key',
      id: ID,
      init: () => post(undefined, JSON.stringify(chat)),
      status: 401,
      error: { code: 'missing_authorization' },
    },
    {
      what: 'a key of the wrong scope',
      id: ID,
      init: () => post(compute, JSON.stringify(chat)),
      status: 403,
      error: {
        code: 'insufficient_scope',
        message:
          'This API key has scope "compute"; this route needs a key with scope "inference" or "global"',
      },
    },
    {
      what: 'malformed JSON',
      id: ID,
      init: () => post(owner, '{"model": "berth/bench", "messages": ['),
      status: 400,
      error: { code: 'invalid_json', message: 'Malformed JSON in request body' },
    },
    {
      what: 'JSON that is not an object or array (strict parsing)',
      id: ID,
      init: () => post(owner, '"hello"'),
      status: 400,
      error: { code: 'invalid_json' },
    },
    {
      what: 'a JSON array',
      id: ID,
      init: () => post(owner, '[1, 2]'),
      status: 400,
      error: { code: 'validation_error', message: 'The request body must be a JSON object' },
    },
    {
      what: 'an oversized body',
      id: ID,
      init: () => post(owner, JSON.stringify({ ...chat, pad: 'x'.repeat(MAX_BODY_BYTES) })),
      status: 413,
      error: { code: 'request_too_large', message: 'Request body too large' },
    },
    {
      what: 'another media type',
      id: ID,
      init: () => post(owner, 'model=berth', 'application/x-www-form-urlencoded'),
      status: 415,
      error: { code: 'unsupported_media_type' },
    },
    {
      what: 'a model the endpoint does not serve',
      id: ID,
      init: () => post(owner, JSON.stringify({ ...chat, model: 'other/model' })),
      status: 400,
      error: { code: 'model_not_served', param: 'model' },
    },
  ])('$what: $status', async ({ id, init, status, error }) => {
    const [fast, routed] = await both(id, 'chat/completions', init());
    expect(fast).toEqual(routed);
    expect(fast.status).toBe(status);
    expect(JSON.parse(fast.body).error).toMatchObject(error);
  });

  it('a body with a byte-order mark, and one sent with charset=utf-8, are read as body-parser reads them', async () => {
    for (const init of [
      post(owner, '\ufeff' + JSON.stringify(chat)),
      post(owner, JSON.stringify(chat), 'application/json; charset=utf-8'),
    ]) {
      const [fast, routed] = await both(ID, 'chat/completions', init);
      expect([fast.status, routed.status]).toEqual([200, 200]);
      expect(fast.headers).toEqual(routed.headers);
    }
  });

  it('a completion: the same status, headers and answer', async () => {
    const [fast, routed] = await both(ID, 'chat/completions', post(owner, JSON.stringify(chat)));
    expect(fast.status).toBe(200);
    expect(fast.headers).toEqual(routed.headers);
    expect(fast.headers['content-type']).toBe('application/json; charset=utf-8');
    const strip = (b: string) => {
      const { id: _id, created: _created, ...rest } = JSON.parse(b) as Record<string, unknown>;
      return rest;
    };
    expect(strip(fast.body)).toEqual(strip(routed.body));
    expect(strip(fast.body)).toMatchObject({ model: 'berth/bench', usage: { completion_tokens: 4 } });
  });

  it('what every request gets first: the request id echoed, and the access log’s series under the route', async () => {
    const count = async () =>
      Number(
        /berth_http_request_duration_seconds_count\{route="\/api\/d\/:id\/chat\/completions",method="POST"\} (\d+)/.exec(
          await metrics.registry.metrics(),
        )?.[1] ?? 0,
      );
    const before = await count();
    const init = post(owner, JSON.stringify(chat));
    const res = await fetch(`${base}/api/d/${ID}/chat/completions`, {
      ...init,
      headers: { ...(init.headers as Record<string, string>), 'x-request-id': 'fast-path.1' },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-request-id')).toBe('fast-path.1');
    await res.text();
    for (let i = 0; i < 50 && (await count()) === before; i++) await new Promise((r) => setTimeout(r, 10));
    expect(await count()).toBe(before + 1);
    expect(await metrics.registry.metrics()).toMatch(
      /berth_http_requests_total\{route="\/api\/d\/:id\/chat\/completions",method="POST",status="200"\} [1-9]/,
    );
  });

  it('a body that arrives after the headers, in pieces, is waited for; one that came with them is read at once', async () => {
    const body = JSON.stringify(chat);
    const port = (server.address() as AddressInfo).port;
    const raw = (pieces: string[], gapMs: number) =>
      new Promise<string>((resolve, reject) => {
        const socket = connect(port, '127.0.0.1');
        let answer = '';
        socket.on('data', (d: Buffer) => {
          answer += d.toString();
          if (/\r\n\r\n[\s\S]*"usage"/.test(answer) || answer.startsWith('HTTP/1.1 4')) socket.end();
        });
        socket.on('end', () => resolve(answer));
        socket.on('error', reject);
        const head =
          `POST /api/d/${ID}/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${owner}\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
        void (async () => {
          for (const [i, piece] of [head, ...pieces].entries()) {
            if (i > 0) await new Promise((r) => setTimeout(r, gapMs));
            socket.write(piece);
          }
        })();
      });
    const split = [body.slice(0, 10), body.slice(10, 30), body.slice(30)];
    for (const answer of [await raw(split, 30), await raw([body], 0)]) {
      expect(answer.split('\r\n')[0]).toBe('HTTP/1.1 200 OK');
      expect(answer).toContain('"completion_tokens":4');
    }
  });

  it('GET models: the same answer', async () => {
    const init = { headers: { authorization: `Bearer ${owner}` } };
    const [fast, routed] = await both(ID, 'models', init);
    expect(fast.status).toBe(200);
    expect(fast.headers).toEqual(routed.headers);
    // The engine names a fresh permission id in every answer: the rest is the same.
    const same = (b: string) => b.replace(/modelperm-[0-9a-f]+/, 'modelperm-…');
    expect(same(fast.body)).toEqual(same(routed.body));
  });
});

describe('dispatch', () => {
  /** The fast path alone, with a marker for what it leaves to the routers after it. */
  async function alone(): Promise<{ url: string; close(): void }> {
    const app = express();
    app.use(dedicatedFastPath(deps, keys, MAX_BODY_BYTES).middleware);
    app.use((_req, res) => void res.status(299).send('left to the routes'));
    app.use(errorHandler(logger));
    const s = app.listen(0, '127.0.0.1');
    await new Promise((r) => s.once('listening', r));
    return { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, close: () => s.close() };
  }

  it('takes the canonical routes and leaves every other spelling, method and session call to the routes', async () => {
    const app = await alone();
    try {
      const auth = { authorization: `Bearer ${owner}` };
      const json = { ...auth, 'content-type': 'application/json' };
      const body = JSON.stringify(chat);
      const status = async (path: string, init: RequestInit = {}) =>
        (await fetch(app.url + path, init)).status;
      expect(await status(`/api/d/${ID}/chat/completions`, { method: 'POST', headers: json, body })).toBe(
        200,
      );
      expect(
        await status(`/api/d/${ID}/completions?x=1`, {
          method: 'POST',
          headers: json,
          body: JSON.stringify({ prompt: 'hi', max_tokens: 4 }),
        }),
      ).toBe(200);
      expect(await status(`/api/d/${ID}/models`, { headers: auth })).toBe(200);
      expect(await status(`/api/d/${ID}/chat/completions`, { method: 'POST', body })).toBe(401);
      for (const [path, init] of [
        [`/api/d/${ID}/chat/completions/`, { method: 'POST', headers: json, body }],
        [`/API/D/${ID}/chat/completions`, { method: 'POST', headers: json, body }],
        [`/api/d/endpt%2Dbench0001/chat/completions`, { method: 'POST', headers: json, body }],
        [`/api/d/${ID}/chat/completions`, { method: 'GET', headers: auth }],
        [`/api/d/${ID}/models`, { method: 'HEAD', headers: auth }],
        [`/api/d/${ID}/models`, { method: 'OPTIONS' }],
        [`/api/d/${ID}/embeddings`, { method: 'POST', headers: json, body }],
        [`/api/d/${ID}/chat/completions`, { method: 'POST', headers: { cookie: 'berth_session=s' }, body }],
      ] as const)
        expect([path, init.method, await status(path, init)]).toEqual([path, init.method, 299]);
    } finally {
      app.close();
    }
  });
});

describe('trace headers, tracing off (platform/tracing.ts)', () => {
  it('a client’s traceparent reaches the engine unchanged, on both paths', async () => {
    for (const spelling of ['chat/completions', 'chat/completions/']) {
      const traceparent = `00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-01`;
      const res = await fetch(`${base}/api/d/${ID}/${spelling}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${owner}`,
          'content-type': 'application/json',
          traceparent,
          tracestate: 'vendor=opaque',
        },
        body: JSON.stringify(chat),
      });
      expect(res.status, await res.text()).toBe(200);
      expect(sim.traceparents.at(-1)).toBe(traceparent);
    }
  });
});
