// Streams cut short are metered for what was generated (issue 21, item 2): the official OpenAI SDK
// aborts a stream mid-way, and the usage row holds what the engine generated up to the cut,
// while the client saw exactly the bytes it would have seen without the proxy's usage request.
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import OpenAI from 'openai';
import { openMigratedDatabase } from '@berth/db';
import { DEFAULT_CATALOG } from '@berth/crds';
import { startEngineSim } from '@berth/engine-sim';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../src/app.ts';
import { keyHasher } from '../src/keys/format.ts';
import { localRevocationBus } from '../src/keys/revocation-bus.ts';
import { keyService, type KeyService } from '../src/keys/service.ts';
import { createMetrics } from '../src/metrics.ts';
import { proxyAgent } from '../src/proxy/agent.ts';
import { memoryRateLimiter } from '../src/proxy/ratelimit.ts';
import { usageRecorder, type UsageRecorder } from '../src/proxy/usage.ts';
import { healthRepository, keyRepository } from '../src/repositories/keys.ts';
import { usageRepository } from '../src/repositories/usage.ts';
import { platformUpstream, type PlatformUpstream } from '../src/upstream/platform.ts';
import { BENCH_ENDPOINT_ID as ID, memoryRuntime } from '@berth/test/support/memory-runtime';
import { eventually } from '@berth/test/support/eventually';
import { createTestDatabase, sql, type TestDatabase } from '@berth/test/support/postgres';

const logger = pino({ level: 'silent' });
let testDb: TestDatabase;
let db: Awaited<ReturnType<typeof openMigratedDatabase>>;
let keys: KeyService;
let upstream: PlatformUpstream;
let usage: UsageRecorder;
const dispatcher = proxyAgent();
let sim: Awaited<ReturnType<typeof startEngineSim>>;
let server: Server;
let client: OpenAI;
let base: string;
let keyValue: string;

beforeAll(async () => {
  testDb = await createTestDatabase('metering_cut');
  db = await openMigratedDatabase({ kind: 'postgres', url: testDb.url });
  keys = keyService({
    repo: keyRepository(db.prisma),
    hash: keyHasher(),
    bus: localRevocationBus(),
    touchIntervalMs: 60_000,
  });
  const runtime = memoryRuntime();
  upstream = platformUpstream({ endpoints: runtime.endpoints, backends: runtime.backends, logger });
  sim = await startEngineSim({ model: 'berth/bench', ttftMs: 0, itlMs: 50, outputTokens: 200 });
  usage = usageRecorder(usageRepository(db.prisma), logger, 60_000);
  const app = createApp({
    config: { MAX_BODY_BYTES: 1 << 20, BERTH_MODELS: [], PROXY_RETRIES: 0 },
    adminToken: 'x'.repeat(20),
    keys,
    health: healthRepository(db.prisma),
    metrics: createMetrics(),
    logger,
    lifecycle: { shuttingDown: false },
    catalog: DEFAULT_CATALOG,
    endpoints: { runtime, upstream, dispatcher, usage, limiter: memoryRateLimiter() },
  });
  server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const { account } = await keys.createAccount('cut');
  runtime.setEndpoint(account.id, 'up');
  runtime.setAddresses([sim.url]);
  keyValue = (await keys.createKey({ accountId: account.id, name: 'k', scope: 'inference' })).value;
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/d/${ID}`;
  client = new OpenAI({ baseURL: base, apiKey: keyValue, maxRetries: 0 });
});

afterAll(async () => {
  server?.close();
  await usage?.close();
  await upstream?.close();
  await dispatcher.close();
  await sim?.close();
  await keys?.close();
  await db?.close();
  await testDb?.drop();
});

async function recorded(): Promise<{ requests: number; prompt: number; completion: number }> {
  await usage.flush();
  const [row] = await sql<{ requests: string; prompt: string; completion: string }>(
    testDb.url,
    'SELECT sum(requests) AS requests, sum(prompt_tokens) AS prompt, sum(completion_tokens) AS completion FROM endpoint_usage',
  );
  return {
    requests: Number(row!.requests ?? 0),
    prompt: Number(row!.prompt ?? 0),
    completion: Number(row!.completion ?? 0),
  };
}

describe('a stream cut short', () => {
  it('is metered for the tokens the engine generated before the client left', async () => {
    const before = await recorded();
    const generatedBefore = sim.metrics.generationTokens;
    const stream = await client.chat.completions.create({
      model: 'berth/bench',
      messages: [{ role: 'user', content: 'Count to a thousand' }],
      stream: true,
      max_tokens: 200,
      ignore_eos: true,
    } as OpenAI.ChatCompletionCreateParamsStreaming);
    let contentChunks = 0;
    for await (const chunk of stream) {
      // The client did not ask for usage: it sees none, on any chunk.
      expect(chunk.usage).toBeUndefined();
      if (chunk.choices[0]?.delta.content) contentChunks++;
      if (contentChunks === 10) break; // the SDK aborts the request
    }
    // The simulator stops generating once the proxy cancels its request.
    await eventually(async () => {
      const g = sim.metrics.generationTokens;
      await new Promise((r) => setTimeout(r, 100));
      return sim.metrics.generationTokens === g;
    });
    const generated = sim.metrics.generationTokens - generatedBefore;
    expect(generated).toBeGreaterThanOrEqual(10);
    expect(generated).toBeLessThan(200);
    const after = await eventually(async () => {
      const a = await recorded();
      return a.requests === before.requests + 1 && a;
    });
    // Metered: at least what the client received, at most what the engine generated. The gap is
    // the tokens the engine produced after the proxy's last read and before it saw the cancel (in
    // flight on the connection; the engine reports no count after a cancel): a few ITLs at most.
    const metered = after.completion - before.completion;
    expect(metered).toBeGreaterThanOrEqual(contentChunks);
    expect(metered).toBeLessThanOrEqual(generated);
    expect(generated - metered).toBeLessThanOrEqual(10);
    expect(after.prompt - before.prompt).toBeGreaterThan(0);
  });

  it('a complete stream is metered exactly, and its bytes carry no usage the client did not ask for', async () => {
    const before = await recorded();
    const res = await fetch(`${base}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keyValue}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'berth/bench',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
        max_tokens: 12,
      }),
    });
    const text = await res.text();
    expect(text).not.toContain('"usage"');
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    const after = await recorded();
    expect(after.requests - before.requests).toBe(1);
    expect(after.completion - before.completion).toBe(12);
  });

  it('a client that asked for continuous usage gets it on every chunk', async () => {
    const res = await fetch(`${base}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keyValue}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'berth/bench',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
        max_tokens: 4,
        stream_options: { include_usage: true, continuous_usage_stats: true },
      }),
    });
    const events = (await res.text()).split('\n\n').filter((e) => e && e !== 'data: [DONE]');
    expect(events.length).toBeGreaterThanOrEqual(5);
    for (const e of events) expect(JSON.parse(e.slice(6)).usage).toBeDefined();
  });
});
