// Elastic inference end to end on one API: the catalog's admin API on real PostgreSQL, and calls by
// display name with the official OpenAI SDK to engine simulators serving as external
// OpenAI-compatible backends — chat (stream and not), completions, embeddings, responses, the
// pinned-model route, unknown models, fallback on 429, billing (usage settled exactly, 402).
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { sql } from '@berth/test/support/postgres';
import { usageByModel } from '@berth/test/support/metering';

let api: TestApi;
let primary: Awaited<ReturnType<typeof startEngineSim>>;
let spare: Awaited<ReturnType<typeof startEngineSim>>;
let embedder: Awaited<ReturnType<typeof startEngineSim>>;
let acct: Awaited<ReturnType<TestApi['newAccount']>>;
let client: OpenAI;
const SECRET = 'sk-upstream-very-secret-0001';

const put = (name: string, body: unknown) =>
  api.admin(`/admin/models/${encodeURIComponent(name)}`, { method: 'PUT', body: JSON.stringify(body) });
const external = (url: string, model: string, apiKey?: string) => ({
  baseUrl: url + '/v1',
  model,
  ...(apiKey ? { apiKey } : {}),
});
const pricing = { inputPerMTok: '1.00', outputPerMTok: '2.00' };

beforeAll(async () => {
  [primary, spare, embedder] = await Promise.all([
    startEngineSim({ model: 'org/primary', ttftMs: 0, itlMs: 2, outputTokens: 12 }),
    startEngineSim({ model: 'org/spare', ttftMs: 0, itlMs: 2, outputTokens: 12 }),
    startEngineSim({ model: 'org/embed', ttftMs: 0, itlMs: 0 }),
  ]);
  api = await startTestApi({
    BERTH_SECRETS_KEY: 'ab'.repeat(32),
    BERTH_FREE_QUERIES: '2',
    BILLING_FLUSH_INTERVAL_MS: '200',
    ELASTIC_COOLDOWN_MS: '200',
  });
  expect(
    (await put('spare', { kind: 'chat', backends: [external(spare.url, 'org/spare')], pricing })).status,
  ).toBe(201);
  const main = await put('main', {
    kind: 'chat',
    backends: [external(primary.url, 'org/primary', SECRET)],
    pricing,
    contextLength: 4096,
    fallbacks: ['spare'],
  });
  expect(main.status).toBe(201);
  expect(
    (await put('embed', { kind: 'embedding', backends: [external(embedder.url, 'org/embed')], pricing }))
      .status,
  ).toBe(201);
  acct = await api.newAccount();
  const credit = await api.admin(`/admin/accounts/${acct.id}/credits`, {
    method: 'POST',
    body: JSON.stringify({ amount: '10.00' }),
    headers: { 'idempotency-key': randomUUID() },
  });
  expect(credit.status).toBe(201);
  client = new OpenAI({ baseURL: api.url + '/api', apiKey: acct.inference, maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await Promise.all([primary?.close(), spare?.close(), embedder?.close()]);
});

describe('the catalog admin API', () => {
  it('shows entries without their secrets, and seals them at rest', async () => {
    const res = await api.admin('/admin/models');
    const text = await res.text();
    expect(text).not.toContain(SECRET);
    const main = JSON.parse(text).data.find((m: { name: string }) => m.name === 'main');
    expect(main).toEqual({
      name: 'main',
      kind: 'chat',
      backends: [{ baseUrl: primary.url + '/v1', model: 'org/primary', secret: 'set' }],
      pricing: { inputPerMTok: '1.000000', outputPerMTok: '2.000000' },
      contextLength: 4096,
      fallbacks: ['spare'],
      updatedAt: expect.any(String),
    });
    const [row] = await sql<{ backends: unknown }>(
      api.db.url,
      "SELECT backends FROM elastic_models WHERE name = 'main'",
    );
    expect(JSON.stringify(row!.backends)).not.toContain(SECRET);
    expect(JSON.stringify(row!.backends)).toMatch(/"secret":"v1\./);
  });

  it('refuses bad entries with a message naming the field, and changes nothing', async () => {
    const cases: [string, unknown, string][] = [
      [
        'x',
        {
          kind: 'chat',
          backends: [external(spare.url, 'm')],
          pricing: { inputPerMTok: '0.1.0', outputPerMTok: '1' },
        },
        'pricing.inputPerMTok',
      ],
      ['x', { kind: 'chat', backends: [{ baseUrl: 'ftp://x', model: 'm' }], pricing }, 'backends.0.baseUrl'],
      ['x', { kind: 'chat', backends: [{ baseUrl: spare.url }], pricing }, 'backends.0.model'],
      ['x', { kind: 'chat', backends: [], pricing }, 'backends'],
      ['x', { kind: 'vision', backends: [external(spare.url, 'm')], pricing }, 'kind'],
      [
        'x',
        { kind: 'chat', backends: [external(spare.url, 'm')], pricing, fallbacks: ['nope'] },
        'fallbacks.0',
      ],
      [
        'spare',
        { kind: 'chat', backends: [external(spare.url, 'org/spare')], pricing, fallbacks: ['main'] },
        'fallbacks',
      ],
      ['x', { kind: 'chat', backends: [{ endpoint: 'endpt-abc' }], pricing }, 'backends.0.endpoint'],
      ['x', { kind: 'chat', backends: [{ endpoint: 'endpt-Bad_id' }], pricing }, 'backends.0.endpoint'],
      ['auto', { kind: 'chat', backends: [external(spare.url, 'm')], pricing }, 'model name'],
    ];
    for (const [name, body, field] of cases) {
      const res = await put(name, body);
      expect(res.status, field).toBe(400);
      const err = await res.json();
      expect(err.error, field).toContain(field === 'model name' ? 'Invalid model name' : field);
    }
    const cycle = await put('spare', {
      kind: 'chat',
      backends: [external(spare.url, 'org/spare')],
      pricing,
      fallbacks: ['main'],
    });
    expect((await cycle.json()).error).toBe(
      'Invalid catalog entry: fallbacks: fallback cycle spare → main → spare',
    );
    // Fallbacks that could never answer: refused at write, naming the field.
    const embedFallback = await put('x', {
      kind: 'chat',
      backends: [external(spare.url, 'm')],
      pricing,
      fallbacks: ['embed'],
    });
    expect(embedFallback.status).toBe(400);
    expect(await embedFallback.json()).toEqual({
      error:
        'Invalid catalog entry: fallbacks.0: embed is an embedding model; a chat model can only fall back to a chat model',
      code: 'validation_error',
    });
    const kindChange = await put('spare', {
      kind: 'embedding',
      backends: [external(spare.url, 'org/spare')],
      pricing,
    });
    expect(kindChange.status).toBe(400);
    expect(await kindChange.json()).toEqual({
      error:
        'Invalid catalog entry: kind: main (a chat model) falls back to spare, so spare must stay a chat model; change its fallbacks first',
      code: 'validation_error',
    });
    const names = (await (await api.admin('/admin/models')).json()).data.map((m: { name: string }) => m.name);
    expect(names).toEqual(['embed', 'main', 'spare']);
    expect((await (await api.admin('/admin/models/spare')).json()).kind).toBe('chat');
    // A completion model may fall back to a chat model (chat models serve text completions too).
    const completion = await put('cmp', {
      kind: 'completion',
      backends: [external(spare.url, 'm')],
      pricing,
      fallbacks: ['spare'],
    });
    expect(completion.status).toBe(201);
    expect((await api.admin('/admin/models/cmp', { method: 'DELETE' })).status).toBe(204);
  });

  it('another API replica on the same database sees a change within 1 s (NOTIFY berth_catalog)', async () => {
    const replica = await startTestApi({ BERTH_SECRETS_KEY: 'ab'.repeat(32) }, api.db);
    try {
      const ids = async () =>
        (
          (await (await fetch(replica.url + '/api/models', { headers: bearer(acct.inference) })).json()) as {
            data: { id: string }[];
          }
        ).data.map((m) => m.id);
      expect(await ids()).not.toContain('late');
      expect(
        (await put('late', { kind: 'chat', backends: [external(spare.url, 'org/spare')], pricing })).status,
      ).toBe(201);
      const started = Date.now();
      await eventually(async () => (await ids()).includes('late'), { timeout: 1000, interval: 50 });
      expect(Date.now() - started).toBeLessThan(1000);
      expect((await api.admin('/admin/models/late', { method: 'DELETE' })).status).toBe(204);
      await eventually(async () => !(await ids()).includes('late'), { timeout: 1000, interval: 50 });
    } finally {
      await replica.stop();
    }
  });

  it('DELETE: 409 while another model falls back to it, 204, then 404', async () => {
    expect((await api.admin('/admin/models/spare', { method: 'DELETE' })).status).toBe(409);
    expect((await put('tmp', { kind: 'chat', backends: [external(spare.url, 'm')], pricing })).status).toBe(
      201,
    );
    expect((await put('tmp', { kind: 'chat', backends: [external(spare.url, 'm2')], pricing })).status).toBe(
      200,
    );
    expect((await api.admin('/admin/models/tmp', { method: 'DELETE' })).status).toBe(204);
    expect((await api.admin('/admin/models/tmp', { method: 'DELETE' })).status).toBe(404);
  });
});

describe('calling catalog models with the OpenAI SDK', () => {
  it('lists the callable models', async () => {
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toEqual(['embed', 'main', 'spare']);
    expect((await client.models.retrieve('main')).id).toBe('main');
  });

  it('chat, non-streaming and streaming; the header names the model that answered', async () => {
    const r = await client.chat.completions
      .create({ model: 'main', messages: [{ role: 'user', content: 'Hello' }] })
      .withResponse();
    expect(r.response.headers.get('x-berth-model')).toBe('main');
    expect(r.response.headers.get('x-berth-fallback-from')).toBeNull();
    expect(r.data.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(r.data.usage!.completion_tokens).toBe(12);
    // The answer names the catalog model, as the header does, never the backend's own name.
    expect(r.data.model).toBe('main');
    const stream = await client.chat.completions.create({
      model: 'main',
      messages: [{ role: 'user', content: 'Hi' }],
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) {
      expect(chunk.usage).toBeUndefined();
      expect(chunk.model).toBe('main');
      text += chunk.choices[0]?.delta.content ?? '';
    }
    expect(text.length).toBeGreaterThan(0);
  });

  it('completions, embeddings, responses (stream and not)', async () => {
    const c = await client.completions.create({ model: 'main', prompt: 'Once upon a time', max_tokens: 5 });
    expect(c.usage!.completion_tokens).toBe(5);
    expect(c.model).toBe('main');
    const e = await client.embeddings.create({ model: 'embed', input: ['a', 'b'] });
    expect(e.data).toHaveLength(2);
    expect(e.data[0]!.embedding.length).toBeGreaterThan(0);
    expect(e.model).toBe('embed');
    const r = await client.responses.create({ model: 'main', input: 'Hello' });
    expect(r.output_text.length).toBeGreaterThan(0);
    expect(r.model).toBe('main');
    const events: string[] = [];
    for await (const ev of await client.responses.create({ model: 'main', input: 'Hello', stream: true }))
      events.push(ev.type);
    expect(events.at(-1)).toBe('response.completed');
    expect(events).toContain('response.output_text.delta');
  });

  it('unknown model: 404 model_not_found; a chat model on embeddings: 400; a compute key: 403', async () => {
    const err = await client.chat.completions
      .create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    const res = await fetch(api.url + '/api/chat/completions', {
      method: 'POST',
      headers: { ...bearer(acct.inference), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'nope', messages: [] }),
    });
    expect(await res.json()).toEqual({
      error: {
        message: 'The model `nope` does not exist',
        type: 'invalid_request_error',
        code: 'model_not_found',
        param: 'model',
      },
      message: 'The model `nope` does not exist',
    });
    const wrongKind = await client.embeddings.create({ model: 'main', input: 'x' }).catch((e: unknown) => e);
    expect(wrongKind).toBeInstanceOf(OpenAI.BadRequestError);
    expect((wrongKind as Error).message).toContain(
      'Model main is a chat model; /api/embeddings needs an embedding model',
    );
    const compute = new OpenAI({ baseURL: api.url + '/api', apiKey: acct.compute, maxRetries: 0 });
    const denied = await compute.chat.completions
      .create({ model: 'main', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(OpenAI.PermissionDeniedError);
  });

  it('/api/b: a pinned key calls its pinned model whatever `model` says; an unpinned key the one asked', async () => {
    const made = await api.admin(`/admin/accounts/${acct.id}/keys`, {
      method: 'POST',
      body: JSON.stringify({ name: 'pinned', scope: 'inference', pinnedModel: 'spare' }),
    });
    const pinned = new OpenAI({
      baseURL: api.url + '/api/b',
      apiKey: ((await made.json()) as { value: string }).value,
      maxRetries: 0,
    });
    const a = await pinned.chat.completions
      .create({ model: 'main', messages: [{ role: 'user', content: 'x' }] })
      .withResponse();
    expect(a.response.headers.get('x-berth-model')).toBe('spare');
    expect(a.data.model).toBe('spare');
    const unpinned = new OpenAI({ baseURL: api.url + '/api/b', apiKey: acct.inference, maxRetries: 0 });
    const b = await unpinned.chat.completions.create({
      model: 'main',
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(b.model).toBe('main');
  });
});

describe('fallback', () => {
  it('on 429 from the primary (at capacity) the fallback model answers, and says so', async () => {
    primary.configure({ capacity: 0 });
    try {
      const r = await client.chat.completions
        .create({ model: 'main', messages: [{ role: 'user', content: 'x' }], stream: true })
        .withResponse();
      expect(r.response.headers.get('x-berth-model')).toBe('spare');
      expect(r.response.headers.get('x-berth-fallback-from')).toBe('main');
      let n = 0;
      for await (const chunk of r.data) {
        expect(chunk.model).toBe('spare');
        if (chunk.choices[0]?.delta.content) n++;
      }
      expect(n).toBe(12);
      // No fallback left: 429 rate_limit_error with retry-after.
      spare.configure({ capacity: 0 });
      await new Promise((r) => setTimeout(r, 250)); // the primary's cool-down passes
      const res = await fetch(api.url + '/api/chat/completions', {
        method: 'POST',
        headers: { ...bearer(acct.inference), 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'main', messages: [{ role: 'user', content: 'x' }] }),
      });
      expect(res.status).toBe(429);
      expect(res.headers.get('retry-after')).toBe('1');
      expect((await res.json()).error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limited' });
    } finally {
      primary.configure({ capacity: null });
      spare.configure({ capacity: null });
    }
  });
});

describe('billing', () => {
  it('charges each call at its model price from the exact usage, recorded per key and model', async () => {
    const other = await api.newAccount();
    await api.admin(`/admin/accounts/${other.id}/credits`, {
      method: 'POST',
      body: JSON.stringify({ amount: '1.00' }),
      headers: { 'idempotency-key': randomUUID() },
    });
    const c = new OpenAI({ baseURL: api.url + '/api', apiKey: other.inference, maxRetries: 0 });
    let prompt = 0;
    let completion = 0;
    for (let i = 0; i < 3; i++) {
      const r = await c.chat.completions.create({
        model: 'spare',
        messages: [{ role: 'user', content: `call ${i}` }],
      });
      prompt += r.usage!.prompt_tokens;
      completion += r.usage!.completion_tokens;
    }
    await api.billing.wallet.flush();
    const rows = await usageByModel(api.db.url, other.id);
    expect(rows).toEqual([
      {
        model: 'spare',
        requests: 3,
        prompt: String(prompt),
        completion: String(completion),
        cost: expect.any(String),
      },
    ]);
    // 1.00 per million input tokens, 2.00 per million output tokens, rounded up per call.
    expect(Number(rows[0]!.cost)).toBeGreaterThanOrEqual(prompt + 2 * completion);
    expect(Number(rows[0]!.cost)).toBeLessThanOrEqual(prompt + 2 * completion + 3);
  });

  it('an unpaid account gets its free queries, then 402 in the dual shape before any upstream work', async () => {
    const unpaid = await api.newAccount();
    const c = new OpenAI({ baseURL: api.url + '/api', apiKey: unpaid.inference, maxRetries: 0 });
    for (let i = 0; i < 2; i++)
      await c.chat.completions.create({ model: 'spare', messages: [{ role: 'user', content: 'x' }] });
    const before = spare.metrics.generationTokens;
    const res = await fetch(api.url + '/api/chat/completions', {
      method: 'POST',
      headers: { ...bearer(unpaid.inference), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'spare', messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(res.status).toBe(402);
    expect(await res.json()).toEqual({
      error: {
        message: 'Insufficient balance / payment required',
        type: 'insufficient_quota',
        code: 'insufficient_balance',
        param: null,
        balance: {
          available: '0.000000',
          held_in_flight: '0.000000',
          needed: expect.stringMatching(/^0\.\d{6}$/),
          waited_ms: expect.any(Number),
          currency: 'USD',
        },
      },
      message: 'Insufficient balance / payment required',
    });
    expect(spare.metrics.generationTokens).toBe(before);
  });
});
