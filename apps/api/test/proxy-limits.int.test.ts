// The dedicated proxy's time limits and held requests, deterministic: real keys on PostgreSQL, a
// real engine simulator, and an in-memory endpoint runtime whose readiness the test controls
// (the Kubernetes path of the same code is covered by test/e2e/dedicated.int.test.ts).
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { KeyService } from '../src/accounts/keys/service.ts';
import type { PlatformUpstream } from '../src/dedicated/upstream/endpoint-upstream.ts';
import { BENCH_ENDPOINT_ID as ID, type MemoryRuntime } from '@berth/test/support/memory-runtime';
import { startMemoryProxy, type MemoryProxy } from '@berth/test/support/memory-proxy';
import { eventually } from '@berth/test/support/eventually';

let proxy: MemoryProxy;
let keys: KeyService;
let runtime: MemoryRuntime;
let upstream: PlatformUpstream;
let sim: Awaited<ReturnType<typeof startEngineSim>>;
let url: string;
let account: { id: string };
let key: { id: string; value: string };

beforeAll(async () => {
  sim = await startEngineSim({ model: 'berth/bench', ttftMs: 0, itlMs: 50, outputTokens: 100 });
  proxy = await startMemoryProxy({
    name: 'proxy_limits',
    env: { WAKE_HOLD_TIMEOUT_MS: '800', REQUEST_TIMEOUT_MS: '1500' },
    phase: 'hibernated',
  });
  ({ keys, runtime, upstream, account } = proxy);
  url = `${proxy.base}/chat/completions`;
});

afterAll(async () => {
  await proxy?.close();
  await sim?.close();
});

beforeEach(async () => {
  runtime.setAddresses([]);
  runtime.setEndpoint(account.id, 'hibernated');
  key = await keys.createKey({ accountId: account.id, name: 'k', scope: 'inference' });
});

const call = (body: Record<string, unknown> = {}, signal?: AbortSignal) =>
  fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.value}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'berth/bench',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 4,
      ...body,
    }),
    signal,
  });

describe('held requests', () => {
  it('are released when a replica becomes ready, after one wake for the whole burst', async () => {
    const wakes = upstream.wakesSignalled;
    const pending = Array.from({ length: 20 }, () => call());
    // All 20 held (not a fixed sleep: on a loaded machine they may take a while to arrive).
    await eventually(() => upstream.inFlight(ID) === 20, { timeout: 10_000 });
    runtime.setAddresses([sim.url]);
    const answers = await Promise.all(pending);
    expect(answers.map((r) => r.status)).toEqual(Array(20).fill(200));
    expect(upstream.wakesSignalled - wakes).toBe(1);
  });

  it('end with 503 endpoint_waking and Retry-After when the endpoint is not ready in time', async () => {
    const started = Date.now();
    const res = await call();
    expect(Date.now() - started).toBeGreaterThanOrEqual(750);
    expect(res.status).toBe(503);
    // From the wake measured above (the burst's), not a fixed guess: what is left of its p95.
    const p95 = upstream.wakeTimes.p95(runtime.endpoints.get(ID)!)!;
    const retryAfter = Number(res.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(Math.max(1, Math.ceil(p95)));
    expect((await res.json()).error).toMatchObject({
      code: 'endpoint_waking',
      message: `Endpoint ${ID} did not become ready within 0.8 s; retry in ${retryAfter} s`,
    });
  });

  it('end with 401 Invalid API key when their key is revoked while they wait', async () => {
    const pending = call();
    await new Promise((r) => setTimeout(r, 150));
    await keys.revoke(account.id, key.id);
    const res = await pending;
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
  });

  it('stop counting as activity when the client goes away', async () => {
    const controller = new AbortController();
    const pending = call({}, controller.signal).catch(() => undefined);
    await new Promise((r) => setTimeout(r, 150));
    expect(upstream.inFlight(ID)).toBe(1);
    controller.abort();
    await pending;
    await new Promise((r) => setTimeout(r, 100));
    expect(upstream.inFlight(ID)).toBe(0);
  });
});

describe('the wall-clock limit', () => {
  it('ends a stream that runs past it with an SSE error frame', async () => {
    runtime.setAddresses([sim.url]);
    const started = Date.now();
    const res = await call({ stream: true, max_tokens: 100, ignore_eos: true });
    expect(res.status).toBe(200);
    const text = await res.text();
    const took = Date.now() - started;
    expect(took).toBeGreaterThanOrEqual(1400);
    expect(took).toBeLessThan(4000); // the engine would have taken 5 s
    const events = text.split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(JSON.parse(events.at(-2)!.slice(6))).toMatchObject({
      error: { code: 'gateway_timeout', message: 'The request exceeded the wall-clock limit of 1.5 s' },
    });
    expect(events.length).toBeGreaterThan(5);
  });
});
