// Issue 20's API items, through the real app on PostgreSQL, a real engine simulator and an in-memory
// endpoint runtime whose readiness the test controls: the accepted `model` forms and the 400, the
// engine's `param` relayed, hardware ids, the admin's account list, heartbeats of held streams.
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { openMigratedDatabase } from '@berth/db';
import { startEngineSim } from '@berth/engine-sim';
import OpenAI from 'openai';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_CATALOG } from '@berth/crds';
import { createApp } from '../src/app.ts';
import { keyHasher } from '../src/keys/format.ts';
import { localRevocationBus } from '../src/keys/revocation-bus.ts';
import { keyService, type KeyService } from '../src/keys/service.ts';
import { createMetrics } from '../src/metrics.ts';
import { endpointMetrics, type EndpointMetrics } from '../src/endpoints/metrics.ts';
import { proxyAgent } from '../src/proxy/agent.ts';
import { memoryRateLimiter } from '../src/proxy/ratelimit.ts';
import { usageRecorder } from '../src/proxy/usage.ts';
import { accountRepository } from '../src/repositories/accounts.ts';
import { healthRepository, keyRepository } from '../src/repositories/keys.ts';
import { usageRepository } from '../src/repositories/usage.ts';
import { platformUpstream, type PlatformUpstream } from '../src/upstream/platform.ts';
import {
  BENCH_ENDPOINT_ID as ID,
  memoryRuntime,
  type MemoryRuntime,
} from '@berth/test/support/memory-runtime';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';
import { eventually } from '@berth/test/support/eventually';

const ADMIN = 'first-hour-admin-token';
const SERVED = 'berth/bench';
const logger = pino({ level: 'silent' });
let testDb: TestDatabase;
let db: Awaited<ReturnType<typeof openMigratedDatabase>>;
let keys: KeyService;
let runtime: MemoryRuntime;
let upstream: PlatformUpstream;
const dispatcher = proxyAgent();
let sim: Awaited<ReturnType<typeof startEngineSim>>;
let server: Server;
let base: string;
let key: string;
let accountId: string;
const HEARTBEAT_MS = 400;
const metrics = createMetrics();
let endpointSeries: EndpointMetrics;

beforeAll(async () => {
  testDb = await createTestDatabase('first_hour');
  db = await openMigratedDatabase({ kind: 'postgres', url: testDb.url });
  keys = keyService({
    repo: keyRepository(db.prisma),
    hash: keyHasher(),
    bus: localRevocationBus(),
    touchIntervalMs: 60_000,
  });
  runtime = memoryRuntime();
  endpointSeries = endpointMetrics(metrics.registry, runtime.endpoints);
  upstream = platformUpstream({
    endpoints: runtime.endpoints,
    backends: runtime.backends,
    logger,
    onWoken: endpointSeries.woken,
  });
  sim = await startEngineSim({ model: SERVED, ttftMs: 0, itlMs: 0, outputTokens: 4 });
  const app = createApp({
    config: { MAX_BODY_BYTES: 1 << 20, PROXY_RETRIES: 0, WAKE_HEARTBEAT_MS: HEARTBEAT_MS },
    adminToken: ADMIN,
    keys,
    accounts: accountRepository(db.prisma),
    health: healthRepository(db.prisma),
    metrics,
    logger,
    lifecycle: { shuttingDown: false },
    catalog: DEFAULT_CATALOG,
    endpoints: {
      runtime,
      upstream,
      dispatcher,
      usage: usageRecorder(usageRepository(db.prisma), logger, 60_000),
      limiter: memoryRateLimiter(),
      metrics: endpointSeries,
    },
  });
  server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const { account, key: created } = await keys.createAccount('first-hour');
  key = created.value;
  accountId = account.id;
  runtime.setEndpoint(account.id, 'up');
  runtime.setAddresses([sim.url]);
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

const chat = (body: Record<string, unknown>) =>
  fetch(`${base}/api/d/${ID}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...body }),
  });

/** The engine's prompt token counter: unchanged when no request reached it. */
const promptTokens = async () =>
  /^vllm:prompt_tokens_total\S* (\S+)$/m.exec(await (await fetch(`${sim.url}/metrics`)).text())?.[1];

describe('model on /api/d/{id}/…', () => {
  it.each([
    ['omitted', {}],
    ['the endpoint id', { model: ID }],
    ['the hub id', { model: SERVED }],
  ])('%s: the served model answers and is named in the response', async (_, body) => {
    const res = await chat(body);
    expect(res.status).toBe(200);
    expect((await res.json()).model).toBe(SERVED);
  });

  it('anything else: 400 naming the served model, param "model", and the engine is not called', async () => {
    const before = await promptTokens();
    expect(Number(before)).toBeGreaterThan(0);
    for (const model of ['gpt-4o', 42, null]) {
      const res = await chat({ model });
      expect(res.status).toBe(400);
      const message = `Endpoint ${ID} serves the model "${SERVED}", not ${JSON.stringify(model)}: send that model, the endpoint id, or no model`;
      expect(await res.json()).toEqual({
        error: { message, type: 'invalid_request_error', code: 'model_not_served', param: 'model' },
        message,
      });
    }
    expect(await promptTokens()).toBe(before);
  });

  it("relays the engine's param in the normalized error", async () => {
    const res = await chat({ max_tokens: 0 });
    expect(res.status).toBe(400);
    expect((await res.json()).error).toMatchObject({
      type: 'invalid_request_error',
      code: 'engine_error',
      param: 'max_tokens',
      message: 'max_tokens must be at least 1, got 0.',
    });
  });
});

describe('GET /api/hardware', () => {
  it('gives each item the id requests take and a display name (gpuType kept, deprecated)', async () => {
    const res = await fetch(`${base}/api/hardware`, { headers: { authorization: `Bearer ${key}` } });
    const { data } = await res.json();
    expect(data).toContainEqual(
      expect.objectContaining({
        id: 'nvidia-l4-24gb',
        displayName: 'NVIDIA L4 24GB',
        gpuType: 'NVIDIA L4 24GB',
      }),
    );
    const doc = await (await fetch(`${base}/openapi.json`)).json();
    const item = doc.paths['/api/hardware'].get.responses['200'].content['application/json'].schema;
    expect(JSON.stringify(item)).toContain('"deprecated":true');
  });
});

describe('GET /admin/accounts', () => {
  const admin = (query: string, token = ADMIN) =>
    fetch(`${base}/admin/accounts${query}`, { headers: { authorization: `Bearer ${token}` } });

  it('pages oldest first and searches by name, case-insensitively', async () => {
    const tag = `acme-${Date.now()}`;
    const made: string[] = [];
    for (const n of [1, 2, 3])
      made.push((await keys.createAccount(`${tag.toUpperCase()} team ${n}`)).account.id);
    await keys.createAccount('someone else');

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

describe('a streaming request held while the endpoint wakes', () => {
  const held = async (run: () => Promise<void>) => {
    runtime.setAddresses([]);
    runtime.setEndpoint(accountId, 'hibernated');
    try {
      await run();
    } finally {
      runtime.setEndpoint(accountId, 'up');
      runtime.setAddresses([sim.url]);
    }
  };

  it('gets the headers at once and `: waking <phase> <elapsed>s` comments every interval, then the answer', () =>
    held(async () => {
      const started = Date.now();
      const res = await chat({ stream: true });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
      const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
      let text = '';
      const beats: number[] = [];
      while (beats.length < 3) {
        const { value } = await reader.read();
        text += value ?? '';
        while (beats.length < (text.match(/^: waking /gm)?.length ?? 0)) beats.push(Date.now() - started);
      }
      expect(text).toMatch(/^: waking hibernated 0s\n\n: waking hibernated [01]s\n\n/);
      // Every HEARTBEAT_MS (not a burst): the third at least two intervals after the first.
      expect(beats[2]! - beats[0]!).toBeGreaterThanOrEqual(2 * HEARTBEAT_MS - 50);
      runtime.setAddresses([sim.url]);
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += value;
      }
      expect(text).toMatch(/data: \{"id":"chatcmpl-[^\n]*"model":"berth\/bench"/);
      expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    }));

  it('the official openai SDK ignores the comments and gets the answer', () =>
    held(async () => {
      const client = new OpenAI({ baseURL: `${base}/api/d/${ID}`, apiKey: key, maxRetries: 0 });
      const stream = await client.chat.completions.create({
        model: SERVED,
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 4,
        stream: true,
      });
      setTimeout(() => runtime.setAddresses([sim.url]), 3 * HEARTBEAT_MS);
      let content = '';
      let chunks = 0;
      for await (const chunk of stream) {
        chunks++;
        content += chunk.choices[0]?.delta?.content ?? '';
      }
      expect(chunks).toBeGreaterThan(1);
      expect(content.length).toBeGreaterThan(0);
    }));

  it('non-streaming requests are held silently, as before', () =>
    held(async () => {
      setTimeout(() => runtime.setAddresses([sim.url]), 3 * HEARTBEAT_MS);
      const res = await chat({});
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      expect((await res.json()).model).toBe(SERVED);
    }));
});

describe('/metrics', () => {
  it('has per-endpoint series after a wake, labelled by endpoint id only', async () => {
    // The streaming tests above woke the endpoint three times (each held call released by a replica).
    const text = await (await fetch(`${base}/metrics`)).text();
    const value = (series: string) =>
      Number(new RegExp(`^${series.replace(/[{}]/g, '\\$&')} (\\S+)$`, 'm').exec(text)?.[1]);
    const ep = `endpoint="${ID}"`;
    expect(value(`berth_endpoint_phase{${ep},phase="up"}`)).toBe(1);
    expect(value(`berth_endpoint_phase{${ep},phase="hibernated"}`)).toBe(0);
    expect(value(`berth_endpoint_wake_duration_seconds_count{${ep}}`)).toBeGreaterThanOrEqual(3);
    expect(value(`berth_endpoint_wake_duration_seconds_sum{${ep}}`)).toBeGreaterThan(0);
    expect(value(`berth_endpoint_held_requests{${ep}}`)).toBe(0);
    expect(value(`berth_endpoint_requests_total{${ep},code="200"}`)).toBeGreaterThanOrEqual(6);
    expect(value(`berth_endpoint_requests_total{${ep},code="400"}`)).toBeGreaterThanOrEqual(4);
    expect(value(`berth_endpoint_tokens_total{${ep},kind="prompt"}`)).toBeGreaterThan(0);
    expect(value(`berth_endpoint_tokens_total{${ep},kind="completion"}`)).toBeGreaterThan(0);
    expect(text).toMatch(/^# TYPE berth_endpoint_build_duration_seconds histogram$/m);
    // Closed vocabulary: no account ids, key material or model names in any label.
    expect(text).not.toMatch(/acct_|svc_live_|berth\/bench/);
  });

  it('counts a held call while it waits', async () => {
    runtime.setAddresses([]);
    runtime.setEndpoint(accountId, 'hibernated');
    const pending = chat({});
    const text = async () => (await fetch(`${base}/metrics`)).text();
    await eventually(
      async () => (await text()).includes(`berth_endpoint_held_requests{endpoint="${ID}"} 1`),
      {
        timeout: 5_000,
      },
    );
    runtime.setEndpoint(accountId, 'up');
    runtime.setAddresses([sim.url]);
    expect((await pending).status).toBe(200);
    expect(await text()).toContain(`berth_endpoint_held_requests{endpoint="${ID}"} 0`);
  });
});
