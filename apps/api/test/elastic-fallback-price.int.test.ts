// Fallback that cannot surprise the bill (issue 32). The catalog: `standard` (2.00 / 4.00 per million
// tokens) falls back to `budget` (1.00 / 2.00), then to `premium` (3.00 / 6.00). When `standard`
// answers 429, `budget` serves and is billed at its price; `premium` is dearer than what was asked for,
// so it serves only with the opt-in (the request's `allow_dearer_fallback`, or the key's
// `allowDearerFallback`). Failed attempts are never billed; nothing falls back after the first byte,
// on a 4xx, or on a content-policy refusal.
import { createServer, type Server } from 'node:http';
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { chargeEntries, usageByModel } from '@berth/test/support/metering';
import { callCost, parsePricing } from '../src/platform/money.ts';

type Sim = Awaited<ReturnType<typeof startEngineSim>>;
let api: TestApi;
let sims: Record<'standard' | 'budget' | 'premium', Sim>;
let refusing: Server;

const PRICES = {
  standard: { inputPerMTok: '2.00', outputPerMTok: '4.00' },
  budget: { inputPerMTok: '1.00', outputPerMTok: '2.00' },
  premium: { inputPerMTok: '3.00', outputPerMTok: '6.00' },
} as const;

const put = (name: string, body: unknown) =>
  api.admin(`/admin/models/${name}`, { method: 'PUT', body: JSON.stringify(body) });

beforeAll(async () => {
  const [standard, budget, premium] = await Promise.all(
    ['standard', 'budget', 'premium'].map((m) =>
      startEngineSim({ model: `org/${m}`, ttftMs: 0, itlMs: 1, outputTokens: 20 }),
    ),
  );
  sims = { standard: standard!, budget: budget!, premium: premium! };
  // An OpenAI-compatible backend that refuses every request on content policy (HTTP 400).
  refusing = createServer((_req, res) => {
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        error: {
          message: 'Your request was rejected as a result of our safety system',
          type: 'invalid_request_error',
          code: 'content_policy_violation',
          param: null,
        },
      }),
    );
  });
  await new Promise<void>((r) => refusing.listen(0, '127.0.0.1', r));
  api = await startTestApi({ BILLING_FLUSH_INTERVAL_MS: '100', ELASTIC_COOLDOWN_MS: '1' });
  const backend = (s: Sim, m: string) => [{ baseUrl: s.url + '/v1', model: `org/${m}` }];
  expect(
    (
      await put('premium', {
        kind: 'chat',
        backends: backend(sims.premium, 'premium'),
        pricing: PRICES.premium,
      })
    ).status,
  ).toBe(201);
  expect(
    (await put('budget', { kind: 'chat', backends: backend(sims.budget, 'budget'), pricing: PRICES.budget }))
      .status,
  ).toBe(201);
  const standardEntry = {
    kind: 'chat',
    backends: backend(sims.standard, 'standard'),
    pricing: PRICES.standard,
    fallbacks: ['budget', 'premium'],
  };
  expect((await put('standard', standardEntry)).status).toBe(201);
  const guarded = {
    kind: 'chat',
    backends: [{ baseUrl: `http://127.0.0.1:${(refusing.address() as AddressInfo).port}/v1`, model: 'x' }],
    pricing: PRICES.standard,
    fallbacks: ['budget'],
  };
  expect((await put('guarded', guarded)).status).toBe(201);
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await Promise.all(Object.values(sims ?? {}).map((s) => s.close()));
  refusing?.close();
});

beforeEach(() => {
  for (const s of Object.values(sims))
    s.configure({ capacity: null, failStatus: null, errorAfterTokens: null });
});

async function paidAccount() {
  const acct = await api.newAccount();
  const res = await api.admin(`/admin/accounts/${acct.id}/credits`, {
    method: 'POST',
    body: JSON.stringify({ amount: '10.00' }),
    headers: { 'idempotency-key': randomUUID() },
  });
  expect(res.status).toBe(201);
  return acct;
}

const chat = (key: string, body: Record<string, unknown> = {}) =>
  fetch(api.url + '/api/chat/completions', {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'standard', messages: [{ role: 'user', content: 'Hello' }], ...body }),
  });

/** The account's charge entries (micro-units) and usage rows, once written. */
async function charges(accountId: string) {
  await api.billing.wallet.flush();
  return {
    ledger: await chargeEntries(api.db.url, accountId),
    usage: await usageByModel(api.db.url, accountId),
  };
}

/** What each engine generated since `before`. */
const generated = (before: Record<string, number>) =>
  Object.fromEntries(Object.entries(sims).map(([n, s]) => [n, s.metrics.generationTokens - before[n]!]));
const snapshot = () =>
  Object.fromEntries(Object.entries(sims).map(([n, s]) => [n, s.metrics.generationTokens]));

describe('a fallback goes only to models priced at or below the one asked for', () => {
  it('standard answers 429: budget serves, named in X-Berth-Model, one charge at its price', async () => {
    const acct = await paidAccount();
    sims.standard.configure({ capacity: 0 });
    const before = snapshot();
    const res = await chat(acct.inference);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-berth-model')).toBe('budget');
    expect(res.headers.get('x-berth-fallback-from')).toBe('standard');
    const body = await res.json();
    expect(body.model).toBe('budget');
    expect(generated(before)).toEqual({ standard: 0, budget: 20, premium: 0 });
    const { ledger, usage } = await charges(acct.id);
    const cost = callCost(
      parsePricing(PRICES.budget)!,
      body.usage.prompt_tokens,
      body.usage.completion_tokens,
    );
    expect(ledger).toEqual([-cost]);
    expect(usage).toEqual([
      {
        model: 'budget',
        requests: 1,
        prompt: String(body.usage.prompt_tokens),
        completion: '20',
        cost: String(cost),
      },
    ]);
  });

  it('budget at capacity too: premium is not tried without the opt-in; the 429 names it; nothing charged', async () => {
    const acct = await paidAccount();
    sims.standard.configure({ capacity: 0 });
    sims.budget.configure({ capacity: 0 });
    const before = snapshot();
    const res = await chat(acct.inference);
    expect(res.status).toBe(429);
    expect((await res.json()).error).toMatchObject({
      code: 'rate_limited',
      message:
        'Model standard is over capacity and no fallback could take the call; fallbacks priced above standard were not tried (premium): send "allow_dearer_fallback": true, or allow it on the key, to use them; retry with backoff',
    });
    expect(generated(before)).toEqual({ standard: 0, budget: 0, premium: 0 });
    expect(await charges(acct.id)).toEqual({ ledger: [], usage: [] });
  });

  it('with the request opt-in, premium serves and is billed at its own price', async () => {
    const acct = await paidAccount();
    sims.standard.configure({ capacity: 0 });
    sims.budget.configure({ capacity: 0 });
    const res = await chat(acct.inference, { allow_dearer_fallback: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-berth-model')).toBe('premium');
    const body = await res.json();
    const cost = callCost(
      parsePricing(PRICES.premium)!,
      body.usage.prompt_tokens,
      body.usage.completion_tokens,
    );
    expect((await charges(acct.id)).ledger).toEqual([-cost]);
  });

  it("with the key's opt-in too; the request may still say no", async () => {
    const acct = await paidAccount();
    const keys = await (await fetch(api.url + '/api/keys', { headers: bearer(acct.global) })).json();
    const inference = keys.data.find((k: { name: string }) => k.name === 'default');
    const patched = await fetch(`${api.url}/api/keys/${inference.id}`, {
      method: 'PATCH',
      headers: { ...bearer(acct.global), 'content-type': 'application/json' },
      body: JSON.stringify({ allowDearerFallback: true }),
    });
    expect(patched.status).toBe(200);
    expect(await patched.json()).toMatchObject({ allowDearerFallback: true });
    sims.standard.configure({ capacity: 0 });
    sims.budget.configure({ capacity: 0 });
    const res = await chat(acct.inference);
    expect(res.headers.get('x-berth-model')).toBe('premium');
    await res.arrayBuffer();
    expect((await chat(acct.inference, { allow_dearer_fallback: false })).status).toBe(429);
    expect((await chat(acct.inference, { allow_dearer_fallback: 'yes' })).status).toBe(400);
  });
});

describe('no fallback where another model would not help, or after the first byte', () => {
  for (const status of [400, 401, 403, 404, 413, 422])
    it(`standard answers ${status}: the caller sees it, budget is not tried, nothing charged`, async () => {
      const acct = await paidAccount();
      sims.standard.configure({ failStatus: status });
      const before = snapshot();
      const res = await chat(acct.inference);
      expect(res.status).toBe(status);
      expect(generated(before)).toEqual({ standard: 0, budget: 0, premium: 0 });
      expect(await charges(acct.id)).toEqual({ ledger: [], usage: [] });
    });

  it('a content-policy refusal is passed on, not retried elsewhere', async () => {
    const acct = await paidAccount();
    const before = snapshot();
    const res = await chat(acct.inference, { model: 'guarded' });
    expect(res.status).toBe(400);
    expect((await res.json()).error.message).toBe(
      'Your request was rejected as a result of our safety system',
    );
    expect(generated(before)).toEqual({ standard: 0, budget: 0, premium: 0 });
    expect(await charges(acct.id)).toEqual({ ledger: [], usage: [] });
  });

  it('an error after the first byte ends the stream; the tokens sent are charged at the model that sent them', async () => {
    const acct = await paidAccount();
    sims.standard.configure({ errorAfterTokens: 5 });
    const before = snapshot();
    const res = await chat(acct.inference, { stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-berth-model')).toBe('standard');
    const text = await res.text();
    expect(text).toContain('"error"');
    expect(generated(before)).toEqual({ standard: 5, budget: 0, premium: 0 });
    const { usage } = await charges(acct.id);
    expect(usage.map((u) => [u.model, u.completion])).toEqual([['standard', '5']]);
  });
});
