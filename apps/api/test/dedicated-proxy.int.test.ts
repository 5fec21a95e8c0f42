// The dedicated proxy, through the real app on PostgreSQL, a real engine simulator and an in-memory
// endpoint runtime whose readiness the test controls: the `model` forms an endpoint accepts and the
// 400, the engine's `param` relayed, heartbeats of held streams, and the per-endpoint metrics.
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { openMigratedDatabase } from '@berth/db';
import { startEngineSim } from '@berth/engine-sim';
import OpenAI from 'openai';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_CATALOG } from '@berth/crds';
import { createApp } from '../src/app.ts';
import { parseConfig } from '../src/platform/config.ts';
import { keyHasher } from '../src/accounts/keys/format.ts';
import { localRevocationBus } from '../src/accounts/keys/revocation-bus.ts';
import { keyService, type KeyService } from '../src/accounts/keys/service.ts';
import { createMetrics } from '../src/platform/metrics.ts';
import { endpointMetrics, type EndpointMetrics } from '../src/dedicated/metrics.ts';
import { proxyAgent } from '../src/dedicated/proxy/agent.ts';
import { memoryRateLimiter } from '../src/dedicated/proxy/ratelimit.ts';
import { usageRecorder } from '../src/dedicated/proxy/usage.ts';
import { keyRepository } from '../src/accounts/keys/repository.ts';
import { healthRepository } from '../src/platform/health-repository.ts';
import { usageRepository } from '../src/dedicated/proxy/usage-repository.ts';
import { platformUpstream, type PlatformUpstream } from '../src/dedicated/upstream/endpoint-upstream.ts';
import {
  BENCH_ENDPOINT_ID as ID,
  memoryRuntime,
  type MemoryRuntime,
} from '@berth/test/support/memory-runtime';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';
import { eventually } from '@berth/test/support/eventually';

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
  testDb = await createTestDatabase('dedicated_proxy');
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
    config: parseConfig({
      MAX_BODY_BYTES: String(1 << 20),
      PROXY_RETRIES: '0',
      WAKE_HEARTBEAT_MS: String(HEARTBEAT_MS),
    }),
    adminToken: 'dedicated-proxy-admin-token',
    keys,
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
  const { account, key: created } = await keys.createAccount('dedicated-proxy');
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

const chat = (body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  fetch(`${base}/api/d/${ID}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
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

  it('gets the headers at once and `: waking <stage> <elapsed>s` comments every interval, then the answer', () =>
    held(async () => {
      const started = Date.now();
      const res = await chat({ stream: true });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
      expect(res.headers.get('x-berth-cold-start')).toBe('true');
      const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
      let text = '';
      const beats: number[] = [];
      while (beats.length < 3) {
        const { value } = await reader.read();
        text += value ?? '';
        while (beats.length < (text.match(/^: waking /gm)?.length ?? 0)) beats.push(Date.now() - started);
      }
      // No operator here to act on the wake: it waits for its signal to be acted on.
      expect(text).toMatch(/^: waking signal 0s\n\n: waking signal [01]s\n\n/);
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
      // How long it was held, as the last comment before the answer (its headers went out first).
      const ms = Number(/^: x-berth-wake-ms (\d+)\n\n(?=data: )/m.exec(text)?.[1]);
      expect(ms).toBeGreaterThanOrEqual(2 * HEARTBEAT_MS - 50);
    }));

  it('the official openai SDK ignores the comments: the same chunks as a stream that was not held', async () => {
    const client = new OpenAI({ baseURL: `${base}/api/d/${ID}`, apiKey: key, maxRetries: 0 });
    const read = async () => {
      const stream = await client.chat.completions.create({
        model: SERVED,
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 4,
        stream: true,
      });
      const chunks: unknown[] = [];
      for await (const chunk of stream) chunks.push({ ...chunk, id: '', created: 0 });
      return chunks;
    };
    const warm = await read();
    let cold: unknown[] = [];
    await held(async () => {
      setTimeout(() => runtime.setAddresses([sim.url]), 3 * HEARTBEAT_MS);
      cold = await read();
    });
    expect(warm.length).toBeGreaterThan(1);
    expect(cold).toEqual(warm);
  });

  it('non-streaming requests are held silently, and the answer says it was a cold start', () =>
    held(async () => {
      setTimeout(() => runtime.setAddresses([sim.url]), 3 * HEARTBEAT_MS);
      const res = await chat({});
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      expect(res.headers.get('x-berth-cold-start')).toBe('true');
      expect(Number(res.headers.get('x-berth-wake-ms'))).toBeGreaterThanOrEqual(3 * HEARTBEAT_MS - 50);
      expect((await res.json()).model).toBe(SERVED);
      // The next call was not held: no such headers.
      const next = await chat({});
      expect(next.headers.get('x-berth-cold-start')).toBeNull();
      expect(next.headers.get('x-berth-wake-ms')).toBeNull();
    }));
});

describe('bounded holds', () => {
  const asleep = (maxHeldRequests?: number) => {
    runtime.setAddresses([]);
    runtime.setEndpoint(accountId, 'hibernated');
    if (maxHeldRequests !== undefined)
      runtime.endpoints.get(ID)!.spec.scaling.maxHeldRequests = maxHeldRequests;
  };
  const awake = () => {
    runtime.setEndpoint(accountId, 'up');
    runtime.setAddresses([sim.url]);
  };

  it('beyond scaling.maxHeldRequests: 503 with Retry-After from the wake time, in the dual shape, and no second wake', async () => {
    asleep(2);
    const wakes = runtime.annotations;
    try {
      const held = [chat({}), chat({})];
      await eventually(() => upstream.holding(ID) === 2, { timeout: 5_000 });
      const annotations = runtime.annotations;
      const res = await chat({});
      expect(res.status).toBe(503);
      // From the wakes measured above (each well under 5 s), not the 30 s default.
      const retryAfter = Number(res.headers.get('retry-after'));
      const p95 = upstream.wakeTimes.p95(runtime.endpoints.get(ID)!)!;
      expect(p95).toBeLessThan(5);
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(Math.ceil(p95));
      const message = `Endpoint ${ID} is waking up and already holds 2 calls (scaling.maxHeldRequests); retry in ${retryAfter} s`;
      expect(await res.json()).toEqual({
        error: { message, type: 'api_error', code: 'endpoint_waking', param: null },
        message,
      });
      // A streaming call is refused the same way: a status, not a stream that ends in an error.
      const stream = await chat({ stream: true });
      expect(stream.status).toBe(503);
      expect(stream.headers.get('content-type')).toMatch(/^application\/json/);
      expect((await stream.json()).error.code).toBe('endpoint_waking');
      // Refusing them wrote nothing: no wake, no activity beyond the two held calls'.
      expect(runtime.annotations).toBe(annotations);
      expect(runtime.annotations - wakes).toBeLessThanOrEqual(2);
      awake();
      for (const r of await Promise.all(held)) expect(r.status).toBe(200);
    } finally {
      awake();
    }
  });

  it('X-Berth-Hold-Timeout bounds the hold; the 503 names it and carries Retry-After', async () => {
    asleep();
    try {
      const t0 = Date.now();
      const res = await chat({}, { 'x-berth-hold-timeout': '0.5' });
      expect(Date.now() - t0).toBeGreaterThanOrEqual(450);
      expect(Date.now() - t0).toBeLessThan(3_000);
      expect(res.status).toBe(503);
      const body = await res.json();
      expect(body.error.code).toBe('endpoint_waking');
      expect(body.message).toMatch(
        new RegExp(`^Endpoint ${ID} did not become ready within 0\\.5 s; retry in \\d+ s$`),
      );
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    } finally {
      awake();
    }
  });

  it('a malformed X-Berth-Hold-Timeout is a 400 naming it, and wakes nothing', async () => {
    asleep();
    const before = runtime.annotations;
    try {
      const res = await chat({}, { 'x-berth-hold-timeout': 'soon' });
      expect(res.status).toBe(400);
      expect((await res.json()).error).toEqual({
        message:
          'X-Berth-Hold-Timeout must be a number of seconds, 0 or more (a hold ends after 240 s at the most), got "soon"',
        type: 'invalid_request_error',
        code: 'validation_error',
        param: 'X-Berth-Hold-Timeout',
      });
      expect(runtime.annotations).toBe(before);
    } finally {
      awake();
    }
  });
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
