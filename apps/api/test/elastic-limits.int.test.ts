// Elastic calls end early as the spec says: a key revoked mid-stream (401 `Invalid API key` as an
// SSE error frame), and the wall-clock limit covering the whole call — and either way the tokens
// generated up to the cut are charged.
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { sql } from '@berth/test/support/postgres';

let api: TestApi;
let sim: Awaited<ReturnType<typeof startEngineSim>>;
let acct: Awaited<ReturnType<TestApi['newAccount']>>;

beforeAll(async () => {
  sim = await startEngineSim({ model: 'org/slow', ttftMs: 0, itlMs: 50, outputTokens: 200 });
  api = await startTestApi({ REQUEST_TIMEOUT_MS: '1500', BILLING_FLUSH_INTERVAL_MS: '200' });
  await api.chatModel('slow', { engineUrl: sim.url, model: 'org/slow' });
  acct = await api.newAccount();
  await api.admin(`/admin/accounts/${acct.id}/credits`, {
    method: 'POST',
    body: JSON.stringify({ amount: '5.00' }),
    headers: { 'idempotency-key': randomUUID() },
  });
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await sim?.close();
});

async function completionTokens(keyId?: string): Promise<number> {
  await api.billing.wallet.flush();
  const [row] = await sql<{ n: string | null }>(
    api.db.url,
    `SELECT sum(completion_tokens) AS n FROM metered_usage WHERE account_id = $1${keyId ? ' AND key_id = $2' : ''}`,
    keyId ? [acct.id, keyId] : [acct.id],
  );
  return Number(row!.n ?? 0);
}

describe('an Elastic stream cut short', () => {
  it('by a revocation: the SDK raises 401 Invalid API key, and what was generated is charged', async () => {
    const made = await (
      await fetch(api.url + '/api/keys', {
        method: 'POST',
        headers: { ...bearer(acct.global), 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'short-lived', scope: 'inference' }),
      })
    ).json();
    const client = new OpenAI({ baseURL: api.url + '/api', apiKey: made.value, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: 'slow',
      messages: [{ role: 'user', content: 'Talk' }],
      stream: true,
    });
    let received = 0;
    const err = await (async () => {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta.content) received++;
        if (received === 5)
          await fetch(`${api.url}/api/keys/${made.id}`, { method: 'DELETE', headers: bearer(acct.global) });
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as Error).message).toContain('Invalid API key');
    expect(received).toBeLessThan(200);
    const charged = await completionTokens(made.id);
    expect(charged).toBeGreaterThanOrEqual(received);
    expect(charged).toBeLessThan(200);
  });

  it('by the wall-clock limit: an error frame naming the limit, then [DONE]; the tokens so far charged', async () => {
    const before = await completionTokens();
    const started = Date.now();
    const res = await fetch(api.url + '/api/chat/completions', {
      method: 'POST',
      headers: { ...bearer(acct.inference), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'slow', messages: [{ role: 'user', content: 'Talk' }], stream: true }),
    });
    const events = (await res.text()).split('\n\n').filter(Boolean);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1400);
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(JSON.parse(events.at(-2)!.slice(6))).toMatchObject({
      error: { code: 'gateway_timeout', message: 'The request exceeded the wall-clock limit of 1.5 s' },
    });
    const charged = (await completionTokens()) - before;
    expect(charged).toBeGreaterThanOrEqual(events.length - 4);
    expect(charged).toBeLessThan(200);
  });
});
