// A wake through Berth in local mode (real PostgreSQL, real engine-simulator processes that model a
// start's stages: weights from this machine's cache or downloaded once, a compile cache, loading),
// as a user lives it: held calls bounded by scaling.maxHeldRequests, held streams naming the stage,
// answers that say they were a cold start, the receipt in GET /api/endpoints/{id}; and five replicas
// starting together on one machine downloading the weights once (engines inherit HF_* from the API).
import { mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { startFakeHub } from '@berth/test/support/fake-hub';

let api: TestApi;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let acct: Awaited<ReturnType<TestApi['newAccount']>>;
const dirs: string[] = [];
const saved = { HF_HOME: process.env.HF_HOME, HF_ENDPOINT: process.env.HF_ENDPOINT };
const temp = (name: string) => {
  const dir = mkdtempSync(path.join(tmpdir(), `berth-wake-${name}-`));
  dirs.push(dir);
  return dir;
};

beforeAll(async () => {
  hub = await startFakeHub({ 'org/small': {}, 'org/five': {} });
  // What local mode's engines inherit from the API process (its HF_* and VLLM_* variables).
  process.env.HF_HOME = temp('hf');
  process.env.HF_ENDPOINT = hub.url;
  process.env.VLLM_CACHE_ROOT = temp('vllm');
  api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: temp('data'),
    HF_ENDPOINT: hub.url,
    WAKE_HEARTBEAT_MS: '150',
    BERTH_LOCAL_ENGINE_ARGS:
      '--ttft-ms 0 --itl-ms 0 --weights-download-ms 800 --compile-ms 600 --compile-cached-ms 100 --startup-delay-ms 300',
  });
  acct = await api.newAccount();
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await hub?.close();
  for (const [k, v] of Object.entries(saved)) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
  delete process.env.VLLM_CACHE_ROOT;
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const send = (method: string, pathname: string, key: string, body?: unknown) =>
  fetch(api.url + pathname, {
    method,
    headers: { ...bearer(key), 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
const get = async (id: string) => (await send('GET', `/api/endpoints/${id}`, acct.compute)).json();
const logs = async (id: string) => (await send('GET', `/api/endpoints/${id}/logs`, acct.compute)).text();
const status = (id: string, want: string, timeout: number) =>
  eventually(
    async () => {
      const e = await get(id);
      return e.status === want ? e : false;
    },
    { timeout, interval: 100, description: `${id} ${want}` },
  );
const hardware = { gpuType: 'nvidia-l4-24gb', gpuCount: 1 };
/** POST /api/endpoints of `model` on one L4: the new endpoint's id. */
const create = async (model: string, scaling: Record<string, number>) => {
  const res = await send('POST', '/api/endpoints', acct.compute, { model, hardware, scaling });
  expect(res.status).toBe(201);
  return ((await res.json()) as { id: string }).id;
};
const chat = (id: string, body: Record<string, unknown> = {}) =>
  send('POST', `/api/d/${id}/chat/completions`, acct.inference, {
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 4,
    ...body,
  });

describe('five replicas starting together on one machine', () => {
  it('download the weights once: one GET from the hub, the other four wait for it', async () => {
    const id = await create('org/five', { minReplicas: 5, maxReplicas: 5 });
    const up = await eventually(
      async () => {
        const e = await get(id);
        return e.readyReplicas === 5 ? e : false;
      },
      { timeout: 60_000, interval: 200, description: '5 replicas ready' },
    );
    expect(up.status).toBe('up');
    expect(hub.downloads('org/five')).toBe(1);
    const log = await logs(id);
    expect(log.match(/Downloading model weights of org\/five/g)).toHaveLength(1);
    expect(log.match(/Waiting for another process downloading model weights of org\/five/g)).toHaveLength(4);
    await send('DELETE', `/api/endpoints/${id}`, acct.compute);
  }, 90_000);
});

describe('scaling.maxHeldRequests', () => {
  it('is set on create and by PATCH and shown (default 256); out of range is a 400 that changes nothing', async () => {
    const created = await send('POST', '/api/endpoints', acct.compute, { model: 'org/small', hardware });
    const { id, scaling } = await created.json();
    expect(scaling).toEqual({
      minReplicas: 0,
      maxReplicas: 1,
      idleTimeoutSeconds: 900,
      maxHeldRequests: 256,
    });
    const patched = await send('PATCH', `/api/endpoints/${id}`, acct.compute, {
      scaling: { maxHeldRequests: 8 },
    });
    expect(patched.status).toBe(200);
    expect((await patched.json()).scaling).toMatchObject({ maxHeldRequests: 8, idleTimeoutSeconds: 900 });
    const bad = await send('PATCH', `/api/endpoints/${id}`, acct.compute, {
      scaling: { maxHeldRequests: 10_001 },
    });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({
      error: 'Invalid request body: scaling.maxHeldRequests: must be at most 10000',
      code: 'validation_error',
    });
    expect((await get(id)).scaling.maxHeldRequests).toBe(8);
    await send('DELETE', `/api/endpoints/${id}`, acct.compute);
  });
});

describe('a wake, from the request to the first byte', () => {
  it('holds at most maxHeldRequests calls, names the stage, marks the answers cold, and keeps a receipt', async () => {
    const id = await create('org/small', { idleTimeoutSeconds: 15, maxHeldRequests: 2 });
    await status(id, 'up', 30_000);
    await status(id, 'hibernated', 40_000);

    // Two held calls: a stream read raw (its comments), and one through the OpenAI SDK.
    const stream = chat(id, { stream: true });
    const sdk = new OpenAI({ baseURL: `${api.url}/api/d/${id}`, apiKey: acct.inference, maxRetries: 0 });
    const answer = sdk.chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'x' }],
    });
    await eventually(() => api.upstream!.holding(id) === 2, { timeout: 5_000, interval: 10 });
    const third = await chat(id);
    expect(third.status).toBe(503);
    const retryAfter = Number(third.headers.get('retry-after'));
    expect((await third.json()).message).toBe(
      `Endpoint ${id} is waking up and already holds 2 calls (scaling.maxHeldRequests); retry in ${retryAfter} s`,
    );
    // Its first wake (the build) is not a wake: the 30 s default, less the seconds this one has run.
    expect(retryAfter).toBeGreaterThan(20);
    expect(retryAfter).toBeLessThanOrEqual(30);
    expect(api.upstream!.wakesSignalled).toBe(1);

    const held = await stream;
    expect(held.headers.get('x-berth-cold-start')).toBe('true');
    const text = await held.text();
    const stages = [...text.matchAll(/^: waking (\w+) \d+s$/gm)].map((m) => m[1]);
    expect(stages.length).toBeGreaterThan(2);
    for (const s of stages) expect(['signal', 'scheduled', 'image', 'engine', 'ready']).toContain(s);
    expect(stages).toContain('engine');
    expect(text).toMatch(/^: x-berth-wake-ms \d+\n\n(?=data: )/m);
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    expect((await answer).choices[0]!.message.content!.length).toBeGreaterThan(0);

    // The receipt: every stage a timestamp, in order, on this machine, warm (it ran here before).
    const wake = await eventually(
      async () => {
        const w = (await get(id)).wake;
        return w?.firstByteAt ? w : false;
      },
      { timeout: 10_000, description: 'first byte in the receipt' },
    );
    expect(wake).toMatchObject({ inProgress: false, stage: 'done', node: hostname(), placement: 'warm' });
    const order = ['requestedAt', 'scaledAt', 'scheduledAt', 'imageReadyAt', 'engineReadyAt', 'firstByteAt'];
    const times = order.map((k) => Date.parse(wake[k]));
    for (let i = 1; i < times.length; i++) expect(times[i]).toBeGreaterThanOrEqual(times[i - 1]!);
    // The engine's start, cached now: loading and the compile cache (0.3 + 0.1 s, and a process start).
    expect(wake.seconds.engine).toBeGreaterThanOrEqual(0.4);
    // Berth's own share: the wake signal acted on, and the first byte once the engine is Ready.
    expect(wake.seconds.signal).toBeLessThan(1);
    expect(wake.seconds.firstByte).toBeLessThan(1);
    expect(wake.seconds.total).toBeCloseTo(wake.elapsedSeconds, 3);
    const metrics = await (await fetch(`${api.url}/metrics`)).text();
    expect(metrics).toMatch(
      new RegExp(`^berth_endpoint_wake_first_byte_seconds_count\\{endpoint="${id}"\\} 1$`, 'm'),
    );
    // The receipt by stage, as the operator exports it on Kubernetes.
    for (const stage of ['signal', 'scheduled', 'image', 'engine', 'total'])
      expect(metrics).toMatch(
        new RegExp(`^berth_endpoint_wake_stage_seconds_count\\{stage="${stage}"\\} 1$`, 'm'),
      );
    // The weights were downloaded once, by the build; the wake found them cached.
    expect(hub.downloads('org/small')).toBe(1);

    // A second wake: now a wake was measured, Retry-After comes from it (it woke in seconds), not
    // from the 30 s default; a client bounds its own hold with X-Berth-Hold-Timeout.
    const measured = Date.parse(wake.firstByteAt) - Date.parse(wake.requestedAt);
    await status(id, 'hibernated', 40_000);
    await eventually(async () => (await get(id)).replicas === 0, { timeout: 20_000, interval: 100 });
    const t0 = Date.now();
    const res = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: {
        ...bearer(acct.inference),
        'content-type': 'application/json',
        'x-berth-hold-timeout': '0.2',
      },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }], max_tokens: 4 }),
    });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(150);
    expect(res.status).toBe(503);
    const retry = Number(res.headers.get('retry-after'));
    expect((await res.json()).message).toBe(
      `Endpoint ${id} did not become ready within 0.2 s; retry in ${retry} s`,
    );
    expect(retry).toBeGreaterThanOrEqual(1);
    expect(retry).toBeLessThanOrEqual(Math.ceil(measured / 1000) + 2);
    expect(retry).toBeLessThan(20);
    // The wake it asked for goes on, once: a held call is answered, a cold start.
    const again = await chat(id);
    expect(again.status).toBe(200);
    expect(again.headers.get('x-berth-cold-start')).toBe('true');
    expect(api.upstream!.wakesSignalled).toBe(2);
    await send('DELETE', `/api/endpoints/${id}`, acct.compute);
  }, 150_000);
});
