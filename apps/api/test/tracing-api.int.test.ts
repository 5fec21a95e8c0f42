// Traces through the API as a user runs it (`npm start`'s entry point, its own process): with
// OTEL_EXPORTER_OTLP_ENDPOINT pointing at an OTLP/HTTP receiver in this process, one chat through
// /api/chat/completions with a client `traceparent`, on a catalog model whose backend answers 503 so
// the call falls back to a second model, is one trace: the request's span under the client's span,
// the key check, the wallet's reservation and settlement, one span per backend tried and under each
// the upstream call, whose span id is the traceparent the engine received; no attribute holds the
// key, the prompt or the answer. Off (OTEL_SDK_DISABLED=true with the same endpoint set), nothing is
// exported and the client's traceparent reaches the engine unchanged.
import { randomBytes, randomUUID } from 'node:crypto';
import OpenAI from 'openai';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnApi, type ApiProcess } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { startOtlpReceiver, type ReceivedSpan } from '@berth/test/support/otlp-receiver';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';

const ADMIN = 'tracing-api-admin-token-0123';
const SERVER = 2;
const CLIENT = 3;
const ERROR = 2;

let db: TestDatabase;
let receiver: Awaited<ReturnType<typeof startOtlpReceiver>>;
let quiet: Awaited<ReturnType<typeof startOtlpReceiver>>;
let on: ApiProcess;
let off: ApiProcess;
let failing: Awaited<ReturnType<typeof startEngineSim>>;
let spare: Awaited<ReturnType<typeof startEngineSim>>;
let key: string;

const admin = (api: ApiProcess, path: string, method: string, body: unknown) =>
  fetch(api.url + path, {
    method,
    headers: {
      authorization: `Bearer ${ADMIN}`,
      'content-type': 'application/json',
      'idempotency-key': randomUUID(),
    },
    body: JSON.stringify(body),
  });

beforeAll(async () => {
  [db, receiver, quiet, failing, spare] = await Promise.all([
    createTestDatabase('tracing_api'),
    startOtlpReceiver(),
    startOtlpReceiver(),
    startEngineSim({ model: 'org/primary', ttftMs: 0, itlMs: 0, outputTokens: 6, failStatus: 503 }),
    startEngineSim({ model: 'org/spare', ttftMs: 0, itlMs: 0, outputTokens: 6 }),
  ]);
  const env = { DATABASE_URL: db.url, ADMIN_TOKEN: ADMIN, ELASTIC_COOLDOWN_MS: '1' };
  // One after the other: the first migrates the database.
  on = await spawnApi({ ...env, OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_SERVICE_NAME: 'berth-test' });
  off = await spawnApi({ ...env, OTEL_EXPORTER_OTLP_ENDPOINT: quiet.url, OTEL_SDK_DISABLED: 'true' });
  const pricing = { inputPerMTok: '1.00', outputPerMTok: '2.00' };
  const spareModel = {
    kind: 'chat',
    backends: [{ baseUrl: spare.url + '/v1', model: 'org/spare' }],
    pricing,
  };
  expect((await admin(on, '/admin/models/spare', 'PUT', spareModel)).status).toBe(201);
  const main = {
    kind: 'chat',
    backends: [{ baseUrl: failing.url + '/v1', model: 'org/primary' }],
    pricing,
    fallbacks: ['spare'],
  };
  expect((await admin(on, '/admin/models/main', 'PUT', main)).status).toBe(201);
  const made = await admin(on, '/admin/accounts', 'POST', { name: 'traced' });
  expect(made.status).toBe(201);
  const { account, key: k } = (await made.json()) as { account: { id: string }; key: { value: string } };
  key = k.value;
  const credit = await admin(on, `/admin/accounts/${account.id}/credits`, 'POST', { amount: '10.00' });
  expect(credit.status).toBe(201);
}, 120_000);

afterAll(async () => {
  await Promise.all([on?.stop(), off?.stop()]);
  await Promise.all([failing?.close(), spare?.close(), receiver?.close(), quiet?.close()]);
  await db?.drop();
});

/** One chat on `main` through `api` with the client's trace headers; the answer and its headers. */
async function chat(api: ApiProcess, headers: Record<string, string>, prompt: string) {
  const client = new OpenAI({ baseURL: api.url + '/api', apiKey: key, maxRetries: 0 });
  const { data, response } = await client.chat.completions
    .create({ model: 'main', messages: [{ role: 'user', content: prompt }] }, { headers })
    .withResponse();
  return { answer: data.choices[0]!.message.content ?? '', model: response.headers.get('x-berth-model') };
}

const hex = (bytes: number) => randomBytes(bytes).toString('hex');

describe('traces through the API', () => {
  it('one chat with a fallback is one trace under the client’s span, and the engine joins it', async () => {
    const traceId = hex(16);
    const clientSpan = hex(8);
    const prompt = `a prompt no span may hold ${randomUUID()}`;
    const { answer, model } = await chat(
      on,
      { traceparent: `00-${traceId}-${clientSpan}-01`, tracestate: 'vendor=opaque' },
      prompt,
    );
    expect(model).toBe('spare');

    // The request's span ends when its response closes; the batch goes out within a second.
    const spans = await eventually(() => {
      const settled = receiver.spans.find((s) => s.name === 'berth.wallet.settle');
      const root = receiver.spans.find((s) => s.kind === SERVER);
      expect(settled && root).toBeTruthy();
      return receiver.spans;
    });
    // One trace: the client's. Every span was made by the API.
    expect(new Set(spans.map((s) => s.traceId))).toEqual(new Set([traceId]));
    expect(new Set(spans.map((s) => s.service))).toEqual(new Set(['berth-test']));
    const named = (name: string) => spans.filter((s) => s.name === name);
    const one = (name: string): ReceivedSpan => {
      const found = named(name);
      expect(found.map((s) => s.name)).toEqual([name]);
      return found[0]!;
    };

    const root = one('POST /api/chat/completions');
    expect(root).toMatchObject({
      kind: SERVER,
      parentSpanId: clientSpan,
      attributes: {
        'http.request.method': 'POST',
        'http.route': '/api/chat/completions',
        'http.response.status_code': 200,
        'berth.catalog_model': 'main',
        'gen_ai.request.model': 'main',
      },
    });
    expect(one('berth.auth')).toMatchObject({
      parentSpanId: root.spanId,
      attributes: { 'berth.outcome': 'ok', 'berth.auth.kind': 'key' },
    });
    expect(one('berth.wallet.reserve')).toMatchObject({
      parentSpanId: root.spanId,
      attributes: { 'berth.outcome': 'ok' },
    });
    expect(one('berth.wallet.settle')).toMatchObject({
      parentSpanId: root.spanId,
      attributes: { 'berth.catalog_model': 'spare', 'gen_ai.usage.output_tokens': 6 },
    });

    // The fallback: two backends tried, each with its upstream call under it.
    const backends = named('berth.elastic.backend').sort(
      (a, b) => Number(a.attributes['berth.fallback']) - Number(b.attributes['berth.fallback']),
    );
    expect(backends.map((b) => [b.parentSpanId, b.attributes['berth.catalog_model']])).toEqual([
      [root.spanId, 'main'],
      [root.spanId, 'spare'],
    ]);
    expect(backends[0]).toMatchObject({
      attributes: {
        'berth.fallback': 0,
        'berth.outcome': 'service_unavailable',
        'berth.backend': 'external',
      },
      status: { code: ERROR },
    });
    expect(backends[1]).toMatchObject({
      attributes: { 'berth.fallback': 1, 'berth.fallback.from': 'main', 'berth.outcome': 'ok' },
    });
    const calls = named('POST /chat/completions');
    expect(calls).toHaveLength(2);
    const callUnder = (b: ReceivedSpan) => calls.find((c) => c.parentSpanId === b.spanId)!;
    expect(callUnder(backends[0]!)).toMatchObject({
      kind: CLIENT,
      attributes: {
        'http.response.status_code': 503,
        'berth.retry': 0,
        'server.port': Number(new URL(failing.url).port),
      },
      status: { code: ERROR },
    });
    expect(callUnder(backends[1]!)).toMatchObject({
      kind: CLIENT,
      attributes: {
        'http.response.status_code': 200,
        'berth.retry': 0,
        'server.port': Number(new URL(spare.url).port),
      },
    });

    // Each engine received a traceparent of the same trace, whose parent is its upstream call's span.
    expect(failing.traceparents.at(-1)).toBe(`00-${traceId}-${callUnder(backends[0]!).spanId}-01`);
    expect(spare.traceparents.at(-1)).toBe(`00-${traceId}-${callUnder(backends[1]!).spanId}-01`);

    // No key, prompt or answer anywhere in what was exported.
    const exported = JSON.stringify(spans);
    expect(answer.length).toBeGreaterThan(10);
    for (const secret of [key, key.slice(-12), prompt, answer]) expect(exported).not.toContain(secret);
  });

  it('off: nothing is exported, and the client’s traceparent reaches the engine unchanged', async () => {
    const traceparent = `00-${hex(16)}-${hex(8)}-01`;
    const before = spare.traceparents.length;
    const { model } = await chat(off, { traceparent, tracestate: 'vendor=opaque' }, 'hello');
    expect(model).toBe('spare');
    expect(failing.traceparents.at(-1)).toBe(traceparent);
    expect(spare.traceparents.slice(before)).toEqual([traceparent]);
    // Longer than the on-process's batch delay: a span would have been sent by now.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(quiet.spans).toEqual([]);
    expect(off.output()).not.toContain('exporting OpenTelemetry traces');
    expect(on.output()).toContain('exporting OpenTelemetry traces');
  });
});
