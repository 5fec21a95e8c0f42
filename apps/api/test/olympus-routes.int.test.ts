// Olympus's embedding routes on the Elastic routes, with the official OpenAI SDK: a policy's routes
// (example prompts per model) matched by the meaning of the last user message, embedded with one
// call to a catalog embedding model (an engine-simulator pool; its bag-of-words embeddings make texts
// that share words close). Real PostgreSQL, real wallet, a local catalog of simulator pools. A
// matching prompt goes to its route's model (`x-berth-olympus-reason: route:<name>`), an unrelated
// one to the objective's choice; an embedding pool that is down or slow never fails the call; the
// dry run reports the route; the embedding call is not charged.
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';

type Sim = Awaited<ReturnType<typeof startEngineSim>>;
let api: TestApi;
let cheap: Sim;
let coder: Sim;
let lawyer: Sim;
let embedder: Sim;
let spare: Sim;

const BUDGET_MS = 2000;

const put = (name: string, body: unknown) =>
  api.admin(`/admin/models/${encodeURIComponent(name)}`, { method: 'PUT', body: JSON.stringify(body) });
const external = (url: string, model: string) => ({ baseUrl: url + '/v1', model });

beforeAll(async () => {
  [cheap, coder, lawyer, embedder, spare] = await Promise.all([
    startEngineSim({ model: 'org/cheap', ttftMs: 0, itlMs: 0, outputTokens: 4 }),
    startEngineSim({ model: 'org/coder', ttftMs: 0, itlMs: 0, outputTokens: 4 }),
    startEngineSim({ model: 'org/lawyer', ttftMs: 0, itlMs: 0, outputTokens: 4 }),
    startEngineSim({ model: 'org/embed', ttftMs: 0, simAdmin: true }),
    startEngineSim({ model: 'org/spare-embed', ttftMs: 0 }),
  ]);
  api = await startTestApi({
    BILLING_FLUSH_INTERVAL_MS: '200',
    ELASTIC_COOLDOWN_MS: '60000',
    OLYMPUS_ROUTE_TIMEOUT_MS: String(BUDGET_MS),
  });
  const chat: [string, Sim, string][] = [
    ['cheap', cheap, '0.10'],
    ['coder', coder, '1.00'],
    ['lawyer', lawyer, '2.00'],
  ];
  for (const [name, sim, price] of chat)
    expect(
      (
        await put(name, {
          kind: 'chat',
          backends: [external(sim.url, `org/${name}`)],
          pricing: { inputPerMTok: price, outputPerMTok: price },
          contextLength: 32_768,
        })
      ).status,
    ).toBe(201);
  // Two embedding models: `embedder` is the cheapest (the default); `spare` is named by one test's
  // policy and taken down there.
  for (const [name, sim, price] of [
    ['embedder', embedder, '0.01'],
    ['spare', spare, '0.02'],
  ] as const)
    expect(
      (
        await put(name, {
          kind: 'embedding',
          backends: [external(sim.url, `org/${name === 'embedder' ? 'embed' : 'spare-embed'}`)],
          pricing: { inputPerMTok: price, outputPerMTok: '0' },
          contextLength: 8192,
        })
      ).status,
    ).toBe(201);
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await Promise.all([cheap, coder, lawyer, embedder, spare].map((s) => s?.close()));
});

const ROUTES = [
  {
    name: 'code',
    model: 'coder',
    examples: [
      'Write a Python function that sorts a list of numbers',
      'Fix the bug in this JavaScript code that throws a TypeError',
      'Refactor this Java class to use an interface',
    ],
  },
  {
    name: 'legal',
    model: 'lawyer',
    examples: [
      'Review this contract clause for liability and indemnity',
      'Is this lease agreement enforceable by the landlord',
      'Explain my rights as a tenant under the rental contract',
    ],
  },
];

async function account() {
  const acct = await api.newAccount();
  const credit = await api.admin(`/admin/accounts/${acct.id}/credits`, {
    method: 'POST',
    headers: { 'idempotency-key': randomUUID() },
    body: JSON.stringify({ amount: '5.00' }),
  });
  expect(credit.status).toBe(201);
  const r = await fetch(api.url + '/api/tools', {
    method: 'POST',
    headers: { ...bearer(acct.global), 'content-type': 'application/json' },
    body: JSON.stringify({ tool_id: 'olympus' }),
  });
  expect(r.status).toBe(200);
  return {
    ...acct,
    client: new OpenAI({ baseURL: api.url + '/api', apiKey: acct.inference, maxRetries: 0 }),
  };
}

async function setPolicy(globalKey: string, policy: object) {
  const r = await fetch(api.url + '/api/olympus/policy', {
    method: 'PUT',
    headers: { ...bearer(globalKey), 'content-type': 'application/json' },
    body: JSON.stringify(policy),
  });
  expect(r.status, await r.clone().text()).toBe(200);
  return r.json();
}

async function dryRun(key: string, body: object) {
  const r = await fetch(api.url + '/api/olympus/route', {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(r.status).toBe(200);
  return { header: r.headers.get('x-berth-olympus-reason'), body: await r.json() };
}

/** Embedding requests a simulator has answered (its vLLM metrics). */
async function embeddingCalls(sim: Sim): Promise<number> {
  const text = await (await fetch(sim.url + '/metrics')).text();
  let n = 0;
  for (const line of text.split('\n'))
    if (line.startsWith('vllm:request_success_total{')) n += Number(line.split(' ').at(-1));
  return n;
}

/** Waits until the policy's examples are embedded (PUT starts it in the background). */
async function routesReady(key: string) {
  for (let i = 0; i < 100; i++) {
    const { body } = await dryRun(key, { messages: [{ role: 'user', content: 'warm up' }] });
    if (body.routing.outcome !== 'embedding_timeout') return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('route examples never embedded');
}

const ask = (content: string) => [{ role: 'user' as const, content }];

describe('embedding routes on the Elastic routes', () => {
  it('two routes send matching prompts to their models (header route:<name>), one embedding call each, not charged', async () => {
    const acct = await account();
    const stored = await setPolicy(acct.global, { routes: ROUTES });
    expect(stored).toMatchObject({ route_threshold: 0.5, embedding_model: null });
    await routesReady(acct.inference);

    const before = await embeddingCalls(embedder);
    const code = await acct.client.chat.completions
      .create({
        model: 'auto',
        messages: ask('Write a Python function that reverses a string'),
        max_tokens: 4,
      })
      .withResponse();
    expect(code.data.model).toBe('coder');
    expect(code.response.headers.get('x-berth-olympus-reason')).toBe('route:code');
    expect(code.response.headers.get('x-berth-model')).toBe('coder');
    expect(code.data.choices[0]!.message.content).toBeTruthy();
    expect(await embeddingCalls(embedder)).toBe(before + 1);

    // The last user message decides, not the earlier turns; streamed the same.
    const models = new Set<string>();
    const stream = await acct.client.chat.completions
      .create({
        model: 'olympus',
        messages: [
          { role: 'system', content: 'You are a helpful assistant.' },
          { role: 'user', content: 'Write a Python function that sorts a list' },
          { role: 'assistant', content: 'Done.' },
          { role: 'user', content: 'Is this lease agreement clause enforceable against the tenant?' },
        ],
        stream: true,
      })
      .withResponse();
    expect(stream.response.headers.get('x-berth-olympus-reason')).toBe('route:legal');
    for await (const chunk of stream.data) models.add(chunk.model);
    expect([...models]).toEqual(['lawyer']);

    // Responses and completions take the route too.
    const resp = await acct.client.responses
      .create({ model: 'auto', input: 'Fix the bug in this JavaScript function', max_output_tokens: 4 })
      .withResponse();
    expect([resp.data.model, resp.response.headers.get('x-berth-olympus-reason')]).toEqual([
      'coder',
      'route:code',
    ]);
    const completion = await acct.client.completions
      .create({ model: 'olympus-auto', prompt: 'Review this contract clause for indemnity', max_tokens: 3 })
      .withResponse();
    expect([completion.data.model, completion.response.headers.get('x-berth-olympus-reason')]).toEqual([
      'lawyer',
      'route:legal',
    ]);
    expect(await embeddingCalls(embedder)).toBe(before + 4);

    // Only the chat models are in the account's usage: the embedding calls are not charged.
    await api.billing.wallet.flush();
    const usage = await fetch(api.url + '/api/billing/usage', { headers: bearer(acct.global) });
    const { data } = (await usage.json()) as { data: { model: string }[] };
    expect(new Set(data.map((d) => d.model))).toEqual(new Set(['coder', 'lawyer']));
  });

  it('an unrelated prompt falls back to the objective (cheapest); the dry run shows how near it came', async () => {
    const acct = await account();
    await setPolicy(acct.global, { routes: ROUTES });
    await routesReady(acct.inference);
    const r = await acct.client.chat.completions
      .create({ model: 'auto', messages: ask('What a lovely sunny day for a walk in the park') })
      .withResponse();
    expect([r.data.model, r.response.headers.get('x-berth-olympus-reason')]).toEqual(['cheap', 'cheapest']);
    const dry = await dryRun(acct.inference, {
      messages: ask('What a lovely sunny day for a walk in the park'),
    });
    expect(dry.body).toMatchObject({
      model: 'cheap',
      reason: 'cheapest',
      routing: { outcome: 'below_threshold', embedding_model: 'embedder' },
    });
    expect(dry.body.routing.nearest.similarity).toBeLessThan(0.5);

    // The same prompt with a threshold it passes: that route decides.
    const nearest = dry.body.routing.nearest as { name: string; model: string; similarity: number };
    await setPolicy(acct.global, { routes: ROUTES, route_threshold: Math.max(0, nearest.similarity - 0.01) });
    await routesReady(acct.inference);
    const low = await acct.client.chat.completions
      .create({ model: 'auto', messages: ask('What a lovely sunny day for a walk in the park') })
      .withResponse();
    expect([low.data.model, low.response.headers.get('x-berth-olympus-reason')]).toEqual([
      nearest.model,
      `route:${nearest.name}`,
    ]);
  });

  it('the dry run reports the route, its embedding model and similarity; nothing charged', async () => {
    const acct = await account();
    await setPolicy(acct.global, { routes: ROUTES });
    await routesReady(acct.inference);
    const dry = await dryRun(acct.inference, {
      endpoint: 'chat/completions',
      messages: ask('Refactor this Java class to use an interface please'),
    });
    expect(dry.header).toBe('route:code');
    expect(dry.body).toMatchObject({
      model: 'coder',
      reason: 'route:code',
      objective: 'cost',
      considered: ['cheap', 'coder', 'lawyer'],
      routing: { outcome: 'matched', embedding_model: 'embedder', nearest: { name: 'code', model: 'coder' } },
    });
    expect(dry.body.routing.nearest.similarity).toBeGreaterThanOrEqual(0.5);
    // No user message to embed: the objective, and the dry run says why; a policy without routes: null.
    const empty = await dryRun(acct.inference, { messages: [{ role: 'system', content: 'Be brief' }] });
    expect(empty.body).toMatchObject({
      model: 'cheap',
      reason: 'cheapest',
      routing: { outcome: 'no_prompt' },
    });
    await setPolicy(acct.global, {});
    expect(
      (await dryRun(acct.inference, { messages: ask('Write a Python function') })).body.routing,
    ).toBeNull();
    const balance = await fetch(api.url + '/api/billing/balance', { headers: bearer(acct.global) });
    expect((await balance.json()).balance).toBe('5.000000');
  });

  it('a slow embedding pool (over the budget): the objective’s choice, the call answered within the budget', async () => {
    const acct = await account();
    await setPolicy(acct.global, { routes: ROUTES });
    await routesReady(acct.inference);
    embedder.configure({ ttftMs: 30_000 });
    try {
      const started = performance.now();
      const r = await acct.client.chat.completions
        .create({ model: 'auto', messages: ask('Write a Python function that reverses a string') })
        .withResponse();
      const took = performance.now() - started;
      expect([r.data.model, r.response.headers.get('x-berth-olympus-reason')]).toEqual(['cheap', 'cheapest']);
      expect(took).toBeGreaterThanOrEqual(BUDGET_MS - 50);
      expect(took).toBeLessThan(BUDGET_MS + 3000);
      const dry = await dryRun(acct.inference, { messages: ask('Write a Python function') });
      expect(dry.body.routing).toEqual({
        outcome: 'embedding_timeout',
        embedding_model: 'embedder',
        nearest: null,
      });
    } finally {
      embedder.configure({ ttftMs: 0 });
    }
  });

  it('the embedding pool down: the objective’s choice, every call still answered; counted in /metrics', async () => {
    const acct = await account();
    await setPolicy(acct.global, { routes: ROUTES, embedding_model: 'spare' });
    await routesReady(acct.inference);
    const up = await dryRun(acct.inference, { messages: ask('Write a Python function that sorts a list') });
    expect(up.body).toMatchObject({ reason: 'route:code', routing: { embedding_model: 'spare' } });
    await spare.close();
    for (const create of [
      () => acct.client.chat.completions.create({ model: 'auto', messages: ask('Write a Python function') }),
      () => acct.client.responses.create({ model: 'auto', input: 'Fix the bug in this JavaScript code' }),
    ]) {
      const r = await create().withResponse();
      expect([r.data.model, r.response.headers.get('x-berth-olympus-reason')]).toEqual(['cheap', 'cheapest']);
    }
    const dry = await dryRun(acct.inference, { messages: ask('Write a Python function') });
    expect(dry.body).toMatchObject({
      model: 'cheap',
      reason: 'cheapest',
      routing: { outcome: 'embedding_failed', embedding_model: 'spare', nearest: null },
    });
    const metrics = await (await fetch(api.url + '/metrics')).text();
    expect(metrics).toMatch(/berth_olympus_route_matches_total\{outcome="embedding_failed"\} [3-9]/);
    expect(metrics).toMatch(/berth_olympus_route_matches_total\{outcome="matched"\} [1-9]/);
  });

  it('PUT refuses an embedding_model that is not a catalog embedding model, and a route outside allowed_models', async () => {
    const acct = await account();
    const cases: [object, string, string][] = [
      [
        { routes: ROUTES, embedding_model: 'coder' },
        'Invalid request body: embedding_model: must be an embedding model of the catalog',
        'embedding_model',
      ],
      [
        { routes: ROUTES, allowed_models: ['cheap', 'coder'] },
        'Invalid request body: routes.1.model: must be one of allowed_models',
        'routes.1.model',
      ],
      [
        { route_threshold: 1.5 },
        'Invalid request body: route_threshold: must be a number from 0 to 1',
        'route_threshold',
      ],
    ];
    for (const [body, message, param] of cases) {
      const r = await fetch(api.url + '/api/olympus/policy', {
        method: 'PUT',
        headers: { ...bearer(acct.global), 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(r.status, param).toBe(400);
      expect(await r.json()).toEqual({
        error: { message, type: 'invalid_request_error', code: 'validation_error', param },
        message,
      });
    }
    const policy = await fetch(api.url + '/api/olympus/policy', { headers: bearer(acct.global) });
    expect((await policy.json()).updated_at).toBeNull();
  });
});

describe('the route’s model unavailable (runs last: leaves coder cooling down)', () => {
  it('a matched route whose model is in 429 cool-down: the objective’s choice, reason fallback', async () => {
    const acct = await account();
    await setPolicy(acct.global, { routes: ROUTES });
    await routesReady(acct.inference);
    coder.configure({ capacity: 0 });
    try {
      await expect(
        acct.client.chat.completions.create({ model: 'coder', messages: ask('hi') }),
      ).rejects.toMatchObject({ status: 429 });
      const r = await acct.client.chat.completions
        .create({ model: 'auto', messages: ask('Write a Python function that reverses a string') })
        .withResponse();
      expect([r.data.model, r.response.headers.get('x-berth-olympus-reason')]).toEqual(['cheap', 'fallback']);
      const dry = await dryRun(acct.inference, {
        messages: ask('Write a Python function that reverses a string'),
      });
      expect(dry.body).toMatchObject({ model: 'cheap', reason: 'fallback', routing: { outcome: 'matched' } });
    } finally {
      coder.configure({ capacity: null });
    }
  });
});
