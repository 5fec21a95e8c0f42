// The prepaid bound cannot be dodged: a call reserves what the engine may actually generate — the
// largest of the limits the request gives (`max_tokens`, `max_completion_tokens`,
// `max_output_tokens`), times the sequences (`n`, `best_of`) — so a balance that cannot pay for it
// answers 402 before the engine is asked. A call that still costs more than its reservation (an
// engine that ignores the limits) is charged in full, down to a balance of zero and never below.
// And a credit that would take a balance past what it may hold is refused with 409, writing nothing.
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { sql } from '@berth/test/support/postgres';

let api: TestApi;
let sim: Awaited<ReturnType<typeof startEngineSim>>;
let liar: Server;
/** Completion tokens the lying upstream reports for every call, whatever the request asked. */
const LIAR_TOKENS = 2_500;

const put = async (name: string, entry: unknown) => {
  const res = await api.admin(`/admin/models/${name}`, { method: 'PUT', body: JSON.stringify(entry) });
  expect(res.status, await res.clone().text()).toBe(201);
};
const credit = (accountId: string, amount: string) =>
  api.admin(`/admin/accounts/${accountId}/credits`, {
    method: 'POST',
    body: JSON.stringify({ amount }),
    headers: { 'idempotency-key': randomUUID() },
  });
const balance = async (key: string): Promise<string> =>
  (
    (await (await fetch(api.url + '/api/billing/balance', { headers: bearer(key) })).json()) as {
      balance: string;
    }
  ).balance;
const post = (key: string, path: string, body: unknown) =>
  fetch(api.url + path, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
const micro = (s: string) => BigInt(s.replace('.', ''));

/** A paid account with `amount` on its balance, and its global key. */
async function funded(amount: string): Promise<{ id: string; key: string }> {
  const a = await api.newAccount();
  expect((await credit(a.id, amount)).status).toBe(201);
  return { id: a.id, key: a.global };
}

beforeAll(async () => {
  // Generates 1,000 tokens unless a limit cuts it short (the limit vLLM obeys: max_completion_tokens
  // before max_tokens on chat).
  sim = await startEngineSim({ model: 'org/gen', ttftMs: 0, itlMs: 0, outputTokens: 1_000 });
  liar = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          id: 'chatcmpl-liar',
          object: 'chat.completion',
          created: 0,
          model: 'org/liar',
          choices: [{ index: 0, message: { role: 'assistant', content: 'x' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 10, completion_tokens: LIAR_TOKENS, total_tokens: 10 + LIAR_TOKENS },
        }),
      );
    });
  });
  await new Promise<void>((r) => liar.listen(0, '127.0.0.1', r));
  api = await startTestApi({ BILLING_FLUSH_INTERVAL_MS: '100' });
  const backend = { baseUrl: sim.url + '/v1', model: 'org/gen' };
  // 1,000 output tokens cost 0.20: far more than the 0.05 the accounts below hold.
  const pricing = { inputPerMTok: '1.00', outputPerMTok: '200.00' };
  await put('gen', { kind: 'chat', backends: [backend], pricing });
  await put('gen-text', { kind: 'completion', backends: [backend], pricing });
  await put('liar', {
    kind: 'chat',
    backends: [{ baseUrl: `http://127.0.0.1:${(liar.address() as AddressInfo).port}/v1`, model: 'org/liar' }],
    pricing,
  });
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await sim?.close();
  await new Promise((r) => liar?.close(r));
});

describe('the reservation bounds what the engine may generate', () => {
  // Each asks for up to 1,000 tokens (or 10 × 100) through a field the old bound did not read
  // first, beside a small one it did; at 200.00 per MTok that is 0.20, and the balance is 0.05.
  const dodges: { route: string; model: string; body: Record<string, unknown> }[] = [
    { route: '/api/chat/completions', model: 'gen', body: { max_tokens: 1, max_completion_tokens: 1_000 } },
    { route: '/api/b/chat/completions', model: 'gen', body: { max_tokens: 1, max_completion_tokens: 1_000 } },
    { route: '/api/chat/completions', model: 'gen', body: { max_tokens: 100, n: 10 } },
    { route: '/api/completions', model: 'gen-text', body: { max_tokens: 100, best_of: 10 } },
    { route: '/api/completions', model: 'gen-text', body: { max_tokens: 100, n: 10 } },
    { route: '/api/responses', model: 'gen', body: { max_tokens: 1, max_output_tokens: 1_000 } },
  ];
  for (const d of dodges) {
    it(`${d.route} with ${JSON.stringify(d.body)}: 402 before the engine runs, nothing charged`, async () => {
      const acct = await funded('0.05');
      const before = sim.metrics.generationTokens;
      const input =
        d.route === '/api/completions'
          ? { prompt: 'Count' }
          : d.route === '/api/responses'
            ? { input: 'Count' }
            : { messages: [{ role: 'user', content: 'Count' }] };
      const res = await post(acct.key, d.route, { model: d.model, ...input, ...d.body });
      expect(res.status, await res.clone().text()).toBe(402);
      expect((await res.json()).error.message).toBe('Insufficient balance / payment required');
      expect(sim.metrics.generationTokens).toBe(before);
      await api.billing.wallet.flush();
      expect(await balance(acct.key)).toBe('0.050000');
    });
  }

  it('a limit the balance covers is answered, and charged exactly what was generated', async () => {
    const acct = await funded('0.05');
    const res = await post(acct.key, '/api/chat/completions', {
      model: 'gen',
      messages: [{ role: 'user', content: 'Count' }],
      max_tokens: 1,
      max_completion_tokens: 100,
    });
    expect(res.status).toBe(200);
    const usage = (await res.json()).usage as { prompt_tokens: number; completion_tokens: number };
    // The engine obeyed max_completion_tokens (100), not max_tokens (1): the bound read it too.
    expect(usage.completion_tokens).toBe(100);
    await api.billing.wallet.flush();
    const cost = (BigInt(usage.prompt_tokens) * 1_000_000n + 100n * 200_000_000n + 999_999n) / 1_000_000n;
    expect(micro(await balance(acct.key))).toBe(50_000n - cost);
  });
});

describe('a call that costs more than its reservation', () => {
  // The lying upstream reports 2,500 completion tokens for a request that allowed 10: 0.50001.
  const cost = 10n + BigInt(LIAR_TOKENS) * 200n;

  it('is charged in full from the balance, not what the lease had room for', async () => {
    const acct = await funded('1.00');
    const res = await post(acct.key, '/api/chat/completions', {
      model: 'liar',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 10,
    });
    expect(res.status).toBe(200);
    await api.billing.wallet.flush();
    expect(micro(await balance(acct.key))).toBe(1_000_000n - cost);
    const [charge] = await sql<{ amount: string; reference: string }>(
      api.db.url,
      `SELECT amount::text, reference FROM ledger_entries WHERE account_id = $1 AND kind = 'charge'`,
      [acct.id],
    );
    expect(charge).toEqual({ amount: String(-cost), reference: '1 call' });
  });

  it('takes the balance to zero, never below, and the account is refused until topped up', async () => {
    const acct = await funded('0.60');
    const call = () =>
      post(acct.key, '/api/chat/completions', {
        model: 'liar',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 10,
      });
    expect((await call()).status).toBe(200);
    expect((await call()).status).toBe(200); // 0.09999 left covers the bound, not the cost
    await api.billing.wallet.flush();
    expect(await balance(acct.key)).toBe('0.000000');
    const refused = await call();
    expect(refused.status).toBe(402);
    expect(await balance(acct.key)).toBe('0.000000');
    expect((await credit(acct.id, '1.00')).status).toBe(201);
    expect((await call()).status).toBe(200);
  });
});

describe('a credit past what a balance may hold', () => {
  it('409 naming the limit, and nothing written', async () => {
    const acct = await funded('999999999999.000000');
    const res = await credit(acct.id, '1.000001');
    expect(res.status).toBe(409);
    expect(await res.json()).toEqual({
      error:
        'The balance is 999999999999.000000; this entry would take it past the largest a balance may hold (999999999999.999999)',
      code: 'balance_conflict',
    });
    expect(await balance(acct.key)).toBe('999999999999.000000');
    const entries = await sql(api.db.url, `SELECT id FROM ledger_entries WHERE account_id = $1`, [acct.id]);
    expect(entries).toHaveLength(1);
    // Up to the limit is fine.
    expect((await credit(acct.id, '0.999999')).status).toBe(201);
    expect(await balance(acct.key)).toBe('999999999999.999999');
  });
});
