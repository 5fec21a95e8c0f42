// Several API replicas in front of the same engines (issue 19, "least outstanding requests … corrected
// by the engines' own vllm:num_requests_running / waiting"): each API replica counts only its own calls,
// so without the engines' view a replica busy with another API replica's traffic looks idle. Here two
// API replicas — two real apps on one PostgreSQL, each with its own endpoint runtime and upstream, as
// two API pods have — serve one leastLoad endpoint on two engine simulators. API 1 holds six long
// calls on replica A (B was not Ready yet when they came: the scale-up moment); once B is Ready, API 2
// (sampling the engines every 100 ms) sends its calls to B; a third API replica with sampling off
// splits them between A and B. Asserted on the engines' own request counts.
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import OpenAI from 'openai';
import { openMigratedDatabase } from '@berth/db';
import { DEFAULT_CATALOG } from '@berth/crds';
import { startEngineSim, type EngineSimHandle } from '@berth/engine-sim';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../src/app.ts';
import { parseConfig } from '../src/platform/config.ts';
import { keyHasher } from '../src/accounts/keys/format.ts';
import { localRevocationBus } from '../src/accounts/keys/revocation-bus.ts';
import { keyService, type KeyService } from '../src/accounts/keys/service.ts';
import { createMetrics } from '../src/platform/metrics.ts';
import { proxyAgent } from '../src/dedicated/proxy/agent.ts';
import { memoryRateLimiter } from '../src/dedicated/proxy/ratelimit.ts';
import { usageRecorder } from '../src/dedicated/proxy/usage.ts';
import { keyRepository } from '../src/accounts/keys/repository.ts';
import { healthRepository } from '../src/platform/health-repository.ts';
import { usageRepository } from '../src/dedicated/proxy/usage-repository.ts';
import { platformUpstream } from '../src/dedicated/upstream/endpoint-upstream.ts';
import {
  BENCH_ENDPOINT_ID as ID,
  memoryRuntime,
  type MemoryRuntime,
} from '@berth/test/support/memory-runtime';
import { eventually } from '@berth/test/support/eventually';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';

const logger = pino({ level: 'silent' });
const SAMPLE_MS = 100;

let testDb: TestDatabase;
let db: Awaited<ReturnType<typeof openMigratedDatabase>>;
let keys: KeyService;
let account: string;
let keyValue: string;
let a: EngineSimHandle;
let b: EngineSimHandle;
const closers: (() => Promise<unknown> | unknown)[] = [];

interface ApiReplica {
  runtime: MemoryRuntime;
  client: OpenAI;
  /** The value of berth_engine_load_samples_total{outcome="ok"} on its /metrics. */
  samples(outcome: 'ok'): Promise<number>;
}

/** One API replica: its own app, endpoint runtime, upstream (engine sampling every `sampleMs`) and client. */
async function apiReplica(sampleMs: number): Promise<ApiReplica> {
  const runtime = memoryRuntime();
  const metrics = createMetrics();
  const upstream = platformUpstream({
    endpoints: runtime.endpoints,
    backends: runtime.backends,
    logger,
    engineLoadIntervalMs: sampleMs,
    onEngineSample: (outcome) => metrics.engineLoadSamples.inc({ outcome }),
  });
  const dispatcher = proxyAgent();
  const usage = usageRecorder(usageRepository(db.prisma), logger, 60_000);
  const app = createApp({
    config: parseConfig({ MAX_BODY_BYTES: String(1 << 20), PROXY_RETRIES: '0' }),
    adminToken: 'x'.repeat(20),
    keys,
    health: healthRepository(db.prisma),
    metrics,
    logger,
    lifecycle: { shuttingDown: false },
    catalog: DEFAULT_CATALOG,
    endpoints: { runtime, upstream, dispatcher, usage, limiter: memoryRateLimiter() },
  });
  const server: Server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  closers.push(
    () => new Promise((r) => server.close(r)),
    () => upstream.close(),
    () => usage.close(),
    () => dispatcher.close(),
  );
  runtime.setEndpoint(account, 'up', 'leastLoad');
  return {
    runtime,
    client: new OpenAI({ baseURL: `${origin}/api/d/${ID}`, apiKey: keyValue, maxRetries: 0 }),
    async samples(outcome) {
      const text = await (await fetch(`${origin}/metrics`)).text();
      const line = text
        .split('\n')
        .find((l) => l.startsWith(`berth_engine_load_samples_total{outcome="${outcome}"}`));
      return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
    },
  };
}

/** Requests each engine has answered (vllm:request_success_total), read from the engines themselves. */
function answered(): [number, number] {
  const count = (s: EngineSimHandle) => s.metrics.finished.get('stop')! + s.metrics.finished.get('length')!;
  return [count(a), count(b)];
}

const ask = (api: ApiReplica, i: number) =>
  api.client.chat.completions.create({
    model: 'berth/bench',
    messages: [{ role: 'user', content: `question ${i}` }],
    max_tokens: 4,
  });

beforeAll(async () => {
  testDb = await createTestDatabase('engine_load');
  db = await openMigratedDatabase({ kind: 'postgres', url: testDb.url });
  keys = keyService({
    repo: keyRepository(db.prisma),
    hash: keyHasher(),
    bus: localRevocationBus(),
    touchIntervalMs: 60_000,
  });
  const sim = () => startEngineSim({ model: 'berth/bench', ttftMs: 0, itlMs: 1, outputTokens: 4 });
  a = await sim();
  b = await sim();
  const created = await keys.createAccount('engine-load');
  account = created.account.id;
  keyValue = (await keys.createKey({ accountId: account, name: 'k', scope: 'inference' })).value;
});

afterAll(async () => {
  for (const close of closers.reverse()) await close();
  await a?.close(0);
  await b?.close(0);
  await keys?.close();
  await db?.close();
  await testDb?.drop();
});

describe('leastLoad across API replicas', () => {
  it('sends API 2’s calls to B while API 1 holds replica A busy; without sampling they split', async () => {
    const api1 = await apiReplica(SAMPLE_MS);
    const api2 = await apiReplica(SAMPLE_MS);
    const api3 = await apiReplica(0);
    // Replica B is not Ready yet: every API replica sees only A.
    for (const api of [api1, api2, api3]) api.runtime.setAddresses([a.url]);
    // API 2 and 3 have had traffic (API 2's sampler runs while its endpoint has calls).
    await ask(api2, 0);
    await ask(api3, 0);

    // API 1 takes six long calls: A takes 60 s to their first token.
    a.configure({ ttftMs: 60_000 });
    const held = new AbortController();
    const long = Array.from({ length: 6 }, (_, i) =>
      api1.client.chat.completions
        .create(
          { model: 'berth/bench', messages: [{ role: 'user', content: `long ${i}` }], max_tokens: 4 },
          {
            signal: held.signal,
          },
        )
        .catch(() => 'aborted'),
    );
    try {
      await eventually(() => a.metrics.running === 6, {
        interval: 20,
        description: 'six calls running on A',
      });
      a.configure({ ttftMs: 0 }); // calls from now on are quick everywhere

      // B becomes Ready; every API replica sees both.
      const ok = await api2.samples('ok');
      const both = [a.url, b.url];
      for (const api of [api1, api2, api3]) api.runtime.setAddresses(both);
      // API 2 has sampled both replicas since (A: running 6, none of them its own).
      // (+5: a round begun before the change reads A alone, then two full rounds.)
      await eventually(async () => (await api2.samples('ok')) >= ok + 5, { interval: 50 });

      // API 2: six calls at once. Its own count says A and B are both idle; the engines say A runs 6.
      let before = answered();
      await Promise.all(Array.from({ length: 6 }, (_, i) => ask(api2, i + 1)));
      let after = answered();
      expect({ onA: after[0] - before[0], onB: after[1] - before[1] }).toEqual({ onA: 0, onB: 6 });
      expect(a.metrics.running).toBe(6); // API 1's calls are still there

      // API 3 samples nothing: by its own counts A and B are both idle, and it sends A its share.
      before = answered();
      await Promise.all(Array.from({ length: 6 }, (_, i) => ask(api3, i + 1)));
      after = answered();
      expect(after[0] - before[0]).toBeGreaterThanOrEqual(2);
      expect(after[0] - before[0] + after[1] - before[1]).toBe(6);
      expect(await api3.samples('ok')).toBe(0);
    } finally {
      held.abort();
      await Promise.all(long);
    }
    // With A's calls gone, API 2's next samples see it idle again: its calls spread over both.
    await eventually(() => a.metrics.running === 0, { interval: 20 });
    const ok = await api2.samples('ok');
    await eventually(async () => (await api2.samples('ok')) >= ok + 5, { interval: 50 });
    const before = answered();
    await Promise.all(Array.from({ length: 6 }, (_, i) => ask(api2, 100 + i)));
    const after = answered();
    expect(after[0] - before[0]).toBeGreaterThanOrEqual(2);
    expect(after[1] - before[1]).toBeGreaterThanOrEqual(2);
  });
});
