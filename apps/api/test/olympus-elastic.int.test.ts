// Olympus on the Elastic routes with the official OpenAI SDK: `model` = auto | olympus |
// olympus-auto on a local catalog of engine-simulator pools (real PostgreSQL, real wallet). Who may
// use it (account switch, key tool pin), which model answers for each policy objective, a pool in
// 429 cool-down skipped, and the dry run POST /api/olympus/route.
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';

type Sim = Awaited<ReturnType<typeof startEngineSim>>;
let api: TestApi;
let cheap: Sim;
let fast: Sim;
let big: Sim;

const NOT_ENABLED =
  'Olympus is not enabled for this API key. Enable it via POST /api/tools with tool_id = "olympus", or adjust the key\'s tool pin.';

const put = (name: string, body: unknown) =>
  api.admin(`/admin/models/${encodeURIComponent(name)}`, { method: 'PUT', body: JSON.stringify(body) });
const external = (url: string, model: string) => ({ baseUrl: url + '/v1', model });

beforeAll(async () => {
  // ttft sets each pool's measured latency: `fast` answers first.
  [cheap, fast, big] = await Promise.all([
    startEngineSim({ model: 'org/cheap', ttftMs: 120, itlMs: 0, outputTokens: 4 }),
    startEngineSim({ model: 'org/fast', ttftMs: 0, itlMs: 0, outputTokens: 4 }),
    startEngineSim({ model: 'org/big', ttftMs: 120, itlMs: 0, outputTokens: 4 }),
  ]);
  api = await startTestApi({ BILLING_FLUSH_INTERVAL_MS: '200', ELASTIC_COOLDOWN_MS: '60000' });
  const models: [string, Sim, string, string, number][] = [
    ['cheap', cheap, '0.10', '0.20', 2048],
    ['fast', fast, '1.00', '2.00', 32_768],
    ['big', big, '3.00', '6.00', 131_072],
  ];
  for (const [name, sim, input, output, contextLength] of models)
    expect(
      (
        await put(name, {
          kind: 'chat',
          backends: [external(sim.url, `org/${name}`)],
          pricing: { inputPerMTok: input, outputPerMTok: output },
          contextLength,
        })
      ).status,
    ).toBe(201);
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await Promise.all([cheap?.close(), fast?.close(), big?.close()]);
});

async function account(options: { olympus?: boolean; credit?: string } = {}) {
  const acct = await api.newAccount();
  const credit = await api.admin(`/admin/accounts/${acct.id}/credits`, {
    method: 'POST',
    headers: { 'idempotency-key': randomUUID() },
    body: JSON.stringify({ amount: options.credit ?? '5.00' }),
  });
  expect(credit.status).toBe(201);
  if (options.olympus !== false) {
    const r = await fetch(api.url + '/api/tools', {
      method: 'POST',
      headers: { ...bearer(acct.global), 'content-type': 'application/json' },
      body: JSON.stringify({ tool_id: 'olympus' }),
    });
    expect(r.status).toBe(200);
  }
  return acct;
}

async function keyWithPin(accountId: string, toolPin: string[]): Promise<string> {
  const r = await api.admin(`/admin/accounts/${accountId}/keys`, {
    method: 'POST',
    body: JSON.stringify({ name: 'pinned', scope: 'inference', toolPin }),
  });
  expect(r.status).toBe(201);
  return ((await r.json()) as { value: string }).value;
}

async function setPolicy(globalKey: string, policy: object) {
  const r = await fetch(api.url + '/api/olympus/policy', {
    method: 'PUT',
    headers: { ...bearer(globalKey), 'content-type': 'application/json' },
    body: JSON.stringify(policy),
  });
  expect(r.status).toBe(200);
}

const sdk = (key: string) => new OpenAI({ baseURL: api.url + '/api', apiKey: key, maxRetries: 0 });
const hello = [{ role: 'user' as const, content: 'Hello' }];

describe('olympus_not_enabled (spec §5.7, §7)', () => {
  it('the account never enabled Olympus: 400 on every Elastic route and name, dual shape; nothing charged', async () => {
    const acct = await account({ olympus: false });
    const client = sdk(acct.inference);
    for (const model of ['auto', 'olympus', 'olympus-auto']) {
      const err = await client.chat.completions.create({ model, messages: hello }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect(err).toMatchObject({ status: 400, code: 'olympus_not_enabled', param: 'model' });
    }
    for (const call of [
      () => client.completions.create({ model: 'auto', prompt: 'Hi' }),
      () => client.responses.create({ model: 'auto', input: 'Hi' }),
    ])
      await expect(call()).rejects.toMatchObject({ status: 400, code: 'olympus_not_enabled' });
    const raw = await fetch(api.url + '/api/chat/completions', {
      method: 'POST',
      headers: { ...bearer(acct.inference), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'auto', messages: hello }),
    });
    expect(raw.status).toBe(400);
    expect(await raw.json()).toEqual({
      error: {
        message: NOT_ENABLED,
        type: 'invalid_request_error',
        code: 'olympus_not_enabled',
        param: 'model',
      },
      message: NOT_ENABLED,
    });
    const balance = await fetch(api.url + '/api/billing/balance', { headers: bearer(acct.global) });
    expect((await balance.json()).balance).toBe('5.000000');
  });

  it('enabled for the account, but a key whose tool pin leaves olympus out: 400; a pin naming it: answered', async () => {
    const acct = await account();
    const without = await keyWithPin(acct.id, ['chronos']);
    await expect(
      sdk(without).chat.completions.create({ model: 'auto', messages: hello }),
    ).rejects.toMatchObject({
      status: 400,
      code: 'olympus_not_enabled',
      error: { message: NOT_ENABLED },
    });
    const withIt = await keyWithPin(acct.id, ['olympus']);
    const ok = await sdk(withIt).chat.completions.create({ model: 'olympus', messages: hello });
    expect(ok.model).toBe('cheap');
  });

  it('the dry run answers the same refusal, in the dual shape', async () => {
    const acct = await account({ olympus: false });
    const r = await fetch(api.url + '/api/olympus/route', {
      method: 'POST',
      headers: { ...bearer(acct.inference), 'content-type': 'application/json' },
      body: JSON.stringify({ messages: hello }),
    });
    expect(r.status).toBe(400);
    expect(await r.json()).toMatchObject({ error: { code: 'olympus_not_enabled' }, message: NOT_ENABLED });
  });
});

describe('the model Olympus chooses', () => {
  it('objective cost (the default): the cheapest model that fits answers, named in `model` and the header', async () => {
    const acct = await account();
    const client = sdk(acct.inference);
    const r = await client.chat.completions
      .create({ model: 'auto', messages: hello, max_tokens: 4 })
      .withResponse();
    expect(r.data.model).toBe('cheap');
    expect(r.response.headers.get('x-berth-olympus-reason')).toBe('cheapest');
    expect(r.response.headers.get('x-berth-model')).toBe('cheap');
    expect(r.data.choices[0]!.message.content).toBeTruthy();

    // Streamed: every chunk names the chosen catalog model; the stream ends normally.
    const models = new Set<string>();
    let text = '';
    for await (const chunk of await client.chat.completions.create({
      model: 'olympus-auto',
      messages: hello,
      stream: true,
    })) {
      models.add(chunk.model);
      text += chunk.choices[0]?.delta.content ?? '';
    }
    expect([...models]).toEqual(['cheap']);
    expect(text).not.toBe('');

    const c = await client.completions.create({ model: 'olympus', prompt: 'Once', max_tokens: 3 });
    expect(c.model).toBe('cheap');
    const resp = await client.responses.create({ model: 'auto', input: 'Hello', max_output_tokens: 4 });
    expect(resp.model).toBe('cheap');
  });

  it('context length: a prompt larger than the cheapest model’s context goes to the cheapest that holds it', async () => {
    const acct = await account();
    const long = 'word '.repeat(600); // 3000 bytes: over cheap's 2048-token context as billing bounds it
    const r = await sdk(acct.inference).chat.completions.create({
      model: 'auto',
      messages: [{ role: 'user', content: long }],
      max_tokens: 4,
    });
    expect(r.model).toBe('fast');
  });

  it('objective quality: the first of allowed_models (listed best first); only allowed models are chosen', async () => {
    const acct = await account();
    await setPolicy(acct.global, { allowed_models: ['big', 'fast'], objective: 'quality' });
    const r = await sdk(acct.inference)
      .chat.completions.create({ model: 'auto', messages: hello, max_tokens: 4 })
      .withResponse();
    expect([r.data.model, r.response.headers.get('x-berth-olympus-reason')]).toEqual(['big', 'best']);
    await setPolicy(acct.global, { allowed_models: ['fast', 'big'], objective: 'cost' });
    const c = await sdk(acct.inference).chat.completions.create({ model: 'auto', messages: hello });
    expect(c.model).toBe('fast'); // cheap is cheaper but not allowed
  });

  it('objective latency: the model measured fastest on recent calls', async () => {
    const acct = await account();
    const client = sdk(acct.inference);
    for (const model of ['cheap', 'fast', 'big'])
      await client.chat.completions.create({ model, messages: hello, max_tokens: 2 });
    await setPolicy(acct.global, { objective: 'latency' });
    const r = await client.chat.completions.create({ model: 'auto', messages: hello }).withResponse();
    expect([r.data.model, r.response.headers.get('x-berth-olympus-reason')]).toEqual(['fast', 'fastest']);
  });

  it('a model whose pool answered 429 is skipped while it cools down (reason fallback)', async () => {
    const acct = await account();
    const client = sdk(acct.inference);
    cheap.configure({ capacity: 0 });
    try {
      await expect(client.chat.completions.create({ model: 'cheap', messages: hello })).rejects.toMatchObject(
        {
          status: 429,
        },
      );
      const r = await client.chat.completions.create({ model: 'auto', messages: hello }).withResponse();
      expect([r.data.model, r.response.headers.get('x-berth-olympus-reason')]).toEqual(['fast', 'fallback']);
      const dry = await fetch(api.url + '/api/olympus/route', {
        method: 'POST',
        headers: { ...bearer(acct.inference), 'content-type': 'application/json' },
        body: JSON.stringify({ messages: hello }),
      });
      expect(await dry.json()).toEqual({
        model: 'fast',
        reason: 'fallback',
        objective: 'cost',
        considered: ['big', 'cheap', 'fast'],
        routing: null,
      });
    } finally {
      cheap.configure({ capacity: null });
    }
  });
});

describe('POST /api/olympus/route (dry run)', () => {
  it('says which model and why, charges nothing, and calls no engine', async () => {
    const acct = await account();
    await setPolicy(acct.global, { allowed_models: ['big', 'fast'], objective: 'quality' });
    const r = await fetch(api.url + '/api/olympus/route', {
      method: 'POST',
      headers: { ...bearer(acct.inference), 'content-type': 'application/json' },
      body: JSON.stringify({ endpoint: 'completions', prompt: 'Hi', max_tokens: 10 }),
    });
    expect(r.status).toBe(200);
    expect(r.headers.get('x-berth-olympus-reason')).toBe('best');
    expect(await r.json()).toEqual({
      model: 'big',
      reason: 'best',
      objective: 'quality',
      considered: ['big', 'fast'],
      routing: null,
    });
    const balance = await fetch(api.url + '/api/billing/balance', { headers: bearer(acct.global) });
    expect((await balance.json()).balance).toBe('5.000000');
  });

  it('invalid bodies: 400 in the dual shape, naming the field', async () => {
    const acct = await account();
    const cases: [unknown, string][] = [
      [{ endpoint: 'embeddings', messages: hello }, 'endpoint'],
      [{ max_tokens: -1, messages: hello }, 'max_tokens'],
      [{ max_tokens: 1.5, messages: hello }, 'max_tokens'],
      [{ tools: 'all', messages: hello }, 'tools'],
      [{ stream: 'yes', messages: hello }, 'stream'],
      // What the probe sent, each answered 200 before: the live route refuses them.
      [{ model: 12345, messages: hello }, 'model'],
      [{ model: 'main', messages: hello }, 'model'],
      [{ messages: 'notalist' }, 'messages'],
      [{}, 'messages'],
      [{ messages: [] }, 'messages'],
      [{ messages: [{ content: 'no role' }] }, 'messages.0.role'],
      [{ endpoint: 'completions', messages: hello }, 'prompt'],
      [{ endpoint: 'completions', prompt: 7 }, 'prompt'],
      [{ endpoint: 'responses', messages: hello }, 'input'],
    ];
    for (const [body, field] of cases) {
      const r = await fetch(api.url + '/api/olympus/route', {
        method: 'POST',
        headers: { ...bearer(acct.inference), 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(r.status, field).toBe(400);
      const err = await r.json();
      expect(err.error.param, field).toBe(field);
      expect(err.error.type, field).toBe('invalid_request_error');
      expect(err.message, field).toBe(err.error.message);
      expect(err.message, field).toContain(field);
    }
    const huge = { messages: hello, max_tokens: 1_000_000 };
    const none = await fetch(api.url + '/api/olympus/route', {
      method: 'POST',
      headers: { ...bearer(acct.inference), 'content-type': 'application/json' },
      body: JSON.stringify(huge),
    });
    expect(none.status).toBe(400);
    expect((await none.json()).error).toMatchObject({
      param: 'model',
      message: `Olympus found no catalog model for this request: it needs a chat model with a context of at least ${1_000_000 + JSON.stringify(huge).length} tokens`,
    });
  });

  it('a missing key: 401 in the dual shape', async () => {
    const r = await fetch(api.url + '/api/olympus/route', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(r.status).toBe(401);
    expect((await r.json()).error.message).toBe('Missing or invalid Authorization header');
  });
});

describe('the chosen model over capacity (runs last: it leaves big cooling down)', () => {
  it('its 429 moves the call to Olympus’s next choice; then it is skipped while it cools down', async () => {
    const acct = await account();
    await setPolicy(acct.global, { allowed_models: ['big', 'fast'], objective: 'quality' });
    const client = sdk(acct.inference);
    big.configure({ capacity: 0 });
    try {
      const r = await client.chat.completions.create({ model: 'auto', messages: hello }).withResponse();
      expect(r.data.model).toBe('fast');
      expect(r.response.headers.get('x-berth-olympus-reason')).toBe('best');
      expect(r.response.headers.get('x-berth-model')).toBe('fast');
      expect(r.response.headers.get('x-berth-fallback-from')).toBe('big');
      const again = await client.chat.completions.create({ model: 'auto', messages: hello }).withResponse();
      expect([again.data.model, again.response.headers.get('x-berth-olympus-reason')]).toEqual([
        'fast',
        'fallback',
      ]);
      expect(again.response.headers.get('x-berth-fallback-from')).toBeNull();
    } finally {
      big.configure({ capacity: null });
    }
  });
});
