// Elastic inference on the real control plane: catalog entries whose backends are dedicated endpoints
// of a platform account (reconciled by the operator on kwok, each pod served by an engine simulator),
// called by another account with the official OpenAI SDK at `<berth>/api` — chat (stream and not),
// completions, embeddings, responses (stream and not), /api/b with a pinned key, unknown model,
// compute key, fallback on 429 to a second entry, a stream cut by the client and one cut by a
// revocation, a hibernated platform pool woken by an Elastic call, the wall-clock limit (on a second
// API replica), and the usage rows charged equal to the simulators' own counts.
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';
import type { EngineSimHandle } from '@berth/engine-sim';
import { beforeAll, describe, expect, it } from 'vitest';
import { kubeconfigPath } from '../../cluster/env.ts';
import { bearer, startTestApi } from '../../support/api.ts';
import { eventually } from '../../support/eventually.ts';
import { sql } from '../../support/postgres.ts';
import {
  api,
  acct as platform,
  other as user,
  engines,
  json,
  ns,
  provision,
  waitStatus,
  useDedicatedEndpoints,
} from './fixture.ts';

useDedicatedEndpoints({ BILLING_FLUSH_INTERVAL_MS: '200', ELASTIC_COOLDOWN_MS: '200' });

const pricing = { inputPerMTok: '1.00', outputPerMTok: '2.00' };
const hardware = { gpuType: 'nvidia-h100-80gb', gpuCount: 1 };
/** Endpoint ids of the platform account: the main pool, the fallback pool, one that sleeps. */
let main: string;
let spare: string;
let sleepy: string;
let client: OpenAI;
/** Tokens each pool's simulators had counted before the test's calls. */
const before = new Map<string, { prompt: number; generation: number }>();

const counts = (id: string) =>
  engines.forEndpoint(id).reduce(
    (n, s: EngineSimHandle) => ({
      prompt: n.prompt + s.metrics.promptTokens,
      generation: n.generation + s.metrics.generationTokens,
    }),
    { prompt: 0, generation: 0 },
  );

const put = (name: string, body: unknown) =>
  api.admin(`/admin/models/${encodeURIComponent(name)}`, { method: 'PUT', body: JSON.stringify(body) });

/** The user's metered usage per catalog model, written to the database first. */
async function usage() {
  await api.billing.wallet.flush();
  const rows = await sql<{
    model: string;
    requests: number;
    prompt: number;
    completion: number;
    cost: string;
  }>(
    api.db.url,
    'SELECT model, sum(requests)::int AS requests, sum(prompt_tokens)::int AS prompt, sum(completion_tokens)::int AS completion, sum(cost)::text AS cost FROM metered_usage WHERE account_id = $1 GROUP BY model',
    [user.id],
  );
  return new Map(rows.map((r) => [r.model, r]));
}

beforeAll(async () => {
  const made = await Promise.all([
    provision({
      name: 'pool-main',
      model: 'org/small',
      hardware,
      scaling: { minReplicas: 1, maxReplicas: 1 },
    }),
    provision({
      name: 'pool-spare',
      model: 'org/small',
      hardware,
      scaling: { minReplicas: 1, maxReplicas: 1 },
    }),
    provision({
      name: 'pool-sleepy',
      model: 'org/small',
      hardware,
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
    }),
  ]);
  for (const m of made) expect(m.status, JSON.stringify(m.body)).toBe(201);
  [main, spare, sleepy] = made.map((m) => m.body.id as string) as [string, string, string];
  await Promise.all([main, spare, sleepy].map((id) => waitStatus(id, 'up', 90_000)));

  expect((await put('spare', { kind: 'chat', backends: [{ endpoint: spare }], pricing })).status).toBe(201);
  expect(
    (await put('small', { kind: 'chat', backends: [{ endpoint: main }], pricing, fallbacks: ['spare'] }))
      .status,
  ).toBe(201);
  expect(
    (await put('small-embed', { kind: 'embedding', backends: [{ endpoint: main }], pricing })).status,
  ).toBe(201);
  expect((await put('sleepy', { kind: 'chat', backends: [{ endpoint: sleepy }], pricing })).status).toBe(201);

  const credit = await api.admin(`/admin/accounts/${user.id}/credits`, {
    method: 'POST',
    body: JSON.stringify({ amount: '10.00' }),
    headers: { 'idempotency-key': randomUUID() },
  });
  expect(credit.status).toBe(201);
  client = new OpenAI({ baseURL: api.url + '/api', apiKey: user.inference, maxRetries: 0 });
  for (const id of [main, spare]) {
    expect(engines.forEndpoint(id)).toHaveLength(1);
    before.set(id, counts(id));
  }
}, 180_000);

describe('Elastic models served by platform endpoints on the control plane', () => {
  it('the catalog names the endpoints; the user lists the display names, and cannot call the endpoints by id', async () => {
    const admin = (await (await api.admin('/admin/models/small')).json()) as { backends: unknown };
    expect(admin.backends).toEqual([{ endpoint: main }]);
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toEqual(['sleepy', 'small', 'small-embed', 'spare']);
    const byId = await fetch(api.url + '/api/chat/completions', {
      method: 'POST',
      headers: json(user.inference),
      body: JSON.stringify({ model: main, messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(byId.status).toBe(403);
    expect((await byId.json()).error.message).toBe('Unauthorized access to dedicated endpoint');
  });

  it('chat, non-streaming and streaming, answered by the platform pool', async () => {
    const r = await client.chat.completions
      .create({ model: 'small', messages: [{ role: 'user', content: 'Hello there' }] })
      .withResponse();
    expect(r.response.headers.get('x-berth-model')).toBe('small');
    expect(r.response.headers.get('x-berth-fallback-from')).toBeNull();
    expect(r.data.object).toBe('chat.completion');
    expect(r.data.model).toBe('small'); // the catalog model that answered, never the backend's name
    expect(r.data.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(r.data.usage!.completion_tokens).toBe(16);

    const stream = await client.chat.completions.create({
      model: 'small',
      messages: [{ role: 'user', content: 'Stream it' }],
      stream: true,
    });
    let text = '';
    let last: string | null | undefined;
    for await (const chunk of stream) {
      expect(chunk.usage ?? undefined).toBeUndefined(); // metered upstream, stripped for the client
      text += chunk.choices[0]?.delta.content ?? '';
      last = chunk.choices[0]?.finish_reason ?? last;
    }
    expect(text.length).toBeGreaterThan(0);
    expect(last).toBe('stop');

    const raw = await fetch(api.url + '/api/chat/completions', {
      method: 'POST',
      headers: json(user.inference),
      body: JSON.stringify({ model: 'small', messages: [{ role: 'user', content: 'x' }], stream: true }),
    });
    expect(raw.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect((await raw.text()).endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it('embeddings and responses (stream and not) from the same pool', async () => {
    const e = await client.embeddings.create({ model: 'small-embed', input: ['first text', 'second text'] });
    expect(e.data).toHaveLength(2);
    expect(e.data[0]!.embedding.length).toBeGreaterThan(0);
    expect(e.usage.prompt_tokens).toBeGreaterThan(0);

    const r = await client.responses.create({ model: 'small', input: 'Hello' });
    expect(r.status).toBe('completed');
    expect(r.output_text.length).toBeGreaterThan(0);
    const events: string[] = [];
    for await (const ev of await client.responses.create({ model: 'small', input: 'Hello', stream: true }))
      events.push(ev.type);
    expect(events[0]).toBe('response.created');
    expect(events).toContain('response.output_text.delta');
    expect(events.at(-1)).toBe('response.completed');
  });

  it('completions; /api/b with a pinned key vs an unpinned one; unknown model 404; a compute key 403', async () => {
    const c = await client.completions.create({ model: 'small', prompt: 'Once upon a time', max_tokens: 5 });
    expect(c.usage!.completion_tokens).toBe(5);

    const made = await api.admin(`/admin/accounts/${user.id}/keys`, {
      method: 'POST',
      body: JSON.stringify({ name: 'pinned', scope: 'inference', pinnedModel: 'spare' }),
    });
    expect(made.status).toBe(201);
    const pinned = new OpenAI({
      baseURL: api.url + '/api/b',
      apiKey: ((await made.json()) as { value: string }).value,
      maxRetries: 0,
    });
    const a = await pinned.chat.completions
      .create({ model: 'small', messages: [{ role: 'user', content: 'x' }] })
      .withResponse();
    expect(a.response.headers.get('x-berth-model')).toBe('spare');
    const unpinned = new OpenAI({ baseURL: api.url + '/api/b', apiKey: user.inference, maxRetries: 0 });
    const b = await unpinned.chat.completions
      .create({ model: 'small', messages: [{ role: 'user', content: 'x' }] })
      .withResponse();
    expect(b.response.headers.get('x-berth-model')).toBe('small');

    const unknown = await fetch(api.url + '/api/chat/completions', {
      method: 'POST',
      headers: json(user.inference),
      body: JSON.stringify({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(unknown.status).toBe(404);
    expect((await unknown.json()).error).toMatchObject({
      message: 'The model `nope` does not exist',
      code: 'model_not_found',
    });
    const compute = await new OpenAI({
      baseURL: api.url + '/api',
      apiKey: user.compute,
      maxRetries: 0,
    }).chat.completions
      .create({ model: 'small', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(compute).toBeInstanceOf(OpenAI.PermissionDeniedError);
  });

  it('the main pool at capacity (429): the call falls back to the spare entry, and says so', async () => {
    const [sim] = engines.forEndpoint(main);
    sim!.configure({ capacity: 0 });
    try {
      const r = await client.chat.completions
        .create({ model: 'small', messages: [{ role: 'user', content: 'x' }], stream: true })
        .withResponse();
      expect(r.response.headers.get('x-berth-model')).toBe('spare');
      expect(r.response.headers.get('x-berth-fallback-from')).toBe('small');
      let n = 0;
      for await (const chunk of r.data) if (chunk.choices[0]?.delta.content) n++;
      expect(n).toBe(16);
      // The spare entry has no fallback: at capacity too, 429 rate_limit_error with retry-after.
      engines.forEndpoint(spare)[0]!.configure({ capacity: 0 });
      await new Promise((r) => setTimeout(r, 250)); // past the main pool's cool-down
      const res = await fetch(api.url + '/api/chat/completions', {
        method: 'POST',
        headers: json(user.inference),
        body: JSON.stringify({ model: 'small', messages: [{ role: 'user', content: 'x' }] }),
      });
      expect(res.status).toBe(429);
      expect(res.headers.get('retry-after')).toBe('1');
      expect((await res.json()).error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limited' });
    } finally {
      sim!.configure({ capacity: null });
      engines.forEndpoint(spare)[0]!.configure({ capacity: null });
    }
  });

  it('usage rows equal the simulators’ own token counts, pool by pool, and are charged at the catalog price', async () => {
    const u = await usage();
    const mainNow = counts(main);
    const spareNow = counts(spare);
    const sum = (k: 'prompt' | 'completion') => (u.get('small')?.[k] ?? 0) + (u.get('small-embed')?.[k] ?? 0);
    expect({ prompt: sum('prompt'), completion: sum('completion') }).toEqual({
      prompt: mainNow.prompt - before.get(main)!.prompt,
      completion: mainNow.generation - before.get(main)!.generation,
    });
    expect({ prompt: u.get('spare')!.prompt, completion: u.get('spare')!.completion }).toEqual({
      prompt: spareNow.prompt - before.get(spare)!.prompt,
      completion: spareNow.generation - before.get(spare)!.generation,
    });
    // small: chat, stream, raw stream, two responses, a completion, /api/b unpinned; spare: the
    // pinned key's call and the call that fell back.
    expect(u.get('small')!.requests).toBe(7);
    expect(u.get('spare')!.requests).toBe(2);
    expect(u.get('small-embed')).toMatchObject({ requests: 1, completion: 0 });
    // 1.00 per million input tokens, 2.00 per million output tokens, in micro-dollars, rounded up per call.
    for (const row of u.values()) {
      expect(Number(row.cost)).toBeGreaterThanOrEqual(row.prompt + 2 * row.completion);
      expect(Number(row.cost)).toBeLessThanOrEqual(row.prompt + 2 * row.completion + row.requests);
    }
    // The caller pays; the platform account that owns the pools is charged nothing for these calls.
    const platformRows = await sql(api.db.url, 'SELECT 1 FROM metered_usage WHERE account_id = $1', [
      platform.id,
    ]);
    expect(platformRows).toEqual([]);
    const balance = await (
      await fetch(api.url + '/api/billing/balance', { headers: bearer(user.global) })
    ).json();
    const spent = [...u.values()].reduce((n, r) => n + Number(r.cost), 0);
    expect(balance).toMatchObject({ paid: true, currency: 'USD' });
    expect(Math.round(Number(balance.balance) * 1e6)).toBe(10_000_000 - spent);
  });

  it('a stream the client cuts is charged for what the engine generated up to the cut', async () => {
    const [sim] = engines.forEndpoint(main);
    await new Promise((r) => setTimeout(r, 250)); // past the cool-down of the fallback test
    const prior = (await usage()).get('small')!;
    const engine = counts(main);
    const controller = new AbortController();
    const res = await fetch(api.url + '/api/chat/completions', {
      method: 'POST',
      headers: json(user.inference),
      body: JSON.stringify({
        model: 'small',
        messages: [{ role: 'user', content: 'a long story' }],
        stream: true,
        max_tokens: 4000,
        ignore_eos: true,
      }),
      signal: controller.signal,
    });
    expect(res.headers.get('x-berth-model')).toBe('small');
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let received = 0;
    while (received < 20) {
      const { value } = await reader.read();
      received += (decoder.decode(value).match(/"content":"[^"]/g) ?? []).length;
    }
    controller.abort();
    await eventually(() => expect(sim!.metrics.running).toBe(0), { timeout: 5000 });
    const made = counts(main);
    const cut = await eventually(
      async () => {
        const now = (await usage()).get('small')!;
        expect(now.requests).toBe(prior.requests + 1);
        return { prompt: now.prompt - prior.prompt, completion: now.completion - prior.completion };
      },
      { timeout: 5000 },
    );
    const generated = made.generation - engine.generation;
    expect(generated).toBeLessThan(4000);
    expect(cut.prompt).toBe(made.prompt - engine.prompt);
    // Charged: at least what the client received, at most what the engine made (the tokens still on
    // the wire when the proxy cancelled are not seen — docs/elastic.md, "Metering streams").
    expect(cut.completion).toBeGreaterThanOrEqual(received);
    expect(cut.completion, `charged ${cut.completion}, engine generated ${generated}`).toBeLessThanOrEqual(
      generated,
    );
  });

  it('a key revoked mid-stream: the SDK raises 401 Invalid API key, and what was generated is charged', async () => {
    const made = await (
      await fetch(api.url + '/api/keys', {
        method: 'POST',
        headers: json(user.global),
        body: JSON.stringify({ name: 'short-lived', scope: 'inference' }),
      })
    ).json();
    const stream = await new OpenAI({
      baseURL: api.url + '/api',
      apiKey: made.value,
      maxRetries: 0,
    }).chat.completions.create({
      model: 'small',
      messages: [{ role: 'user', content: 'a long story' }],
      stream: true,
      max_tokens: 4000,
      ...({ ignore_eos: true } as object),
    });
    let received = 0;
    const err = await (async () => {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta.content) received++;
        if (received === 5) {
          const del = await fetch(`${api.url}/api/keys/${made.id}`, {
            method: 'DELETE',
            headers: bearer(user.global),
          });
          expect(del.status).toBe(200);
        }
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as Error).message).toContain('Invalid API key');
    expect(received).toBeLessThan(4000);
    await api.billing.wallet.flush();
    const [row] = await sql<{ completion: number }>(
      api.db.url,
      'SELECT sum(completion_tokens)::int AS completion FROM metered_usage WHERE key_id = $1',
      [made.id],
    );
    expect(row!.completion).toBeGreaterThanOrEqual(received);
    expect(row!.completion).toBeLessThan(4000);
  });

  it('an Elastic call wakes a hibernated platform pool, held until it is up, and is metered', async () => {
    await waitStatus(sleepy, 'hibernated', 120_000);
    await eventually(() => expect(api.runtime!.backends.addresses(sleepy)).toEqual([]), { timeout: 30_000 });
    const wakes = api.upstream!.wakesSignalled;
    const slow = new OpenAI({
      baseURL: api.url + '/api',
      apiKey: user.inference,
      maxRetries: 0,
      timeout: 120_000,
    });
    const answers = await Promise.all(
      Array.from({ length: 3 }, (_, i) =>
        slow.chat.completions.create({ model: 'sleepy', messages: [{ role: 'user', content: `wake ${i}` }] }),
      ),
    );
    expect(answers.map((a) => a.usage!.completion_tokens)).toEqual([16, 16, 16]);
    expect(api.upstream!.wakesSignalled - wakes).toBe(1);
    // The replica answered; the endpoint's phase follows at the operator's next reconcile.
    await waitStatus(sleepy, 'up', 30_000);
    const woken = counts(sleepy); // the pod's simulator started with the wake: it counted only these
    await eventually(
      async () => {
        const all = await usage();
        expect(all.get('sleepy'), JSON.stringify([...all.values()])).toMatchObject({
          requests: 3,
          prompt: woken.prompt,
          completion: woken.generation,
        });
      },
      { timeout: 10_000 },
    );
  }, 200_000);
  it('the wall-clock limit on another API replica: an error frame naming it, then [DONE]; the tokens so far charged', async () => {
    // A second replica on the same database and namespace, with a 1.5 s wall clock per request.
    const replica = await startTestApi(
      {
        KUBECONFIG: kubeconfigPath(),
        BERTH_NAMESPACE: ns.name,
        REQUEST_TIMEOUT_MS: '1500',
        BILLING_FLUSH_INTERVAL_MS: '200',
      },
      api.db,
    );
    try {
      await eventually(() => expect(replica.runtime!.backends.addresses(main).length).toBe(1), {
        timeout: 30_000,
      });
      const prior = (await usage()).get('small')!;
      const started = Date.now();
      const res = await fetch(replica.url + '/api/chat/completions', {
        method: 'POST',
        headers: json(user.inference),
        body: JSON.stringify({
          model: 'small',
          messages: [{ role: 'user', content: 'a long story' }],
          stream: true,
          max_tokens: 4000,
          ignore_eos: true,
        }),
      });
      expect(res.status).toBe(200);
      const events = (await res.text()).split('\n\n').filter(Boolean);
      expect(Date.now() - started).toBeGreaterThanOrEqual(1400);
      expect(events.at(-1)).toBe('data: [DONE]');
      expect(JSON.parse(events.at(-2)!.slice(6))).toMatchObject({
        error: { code: 'gateway_timeout', message: 'The request exceeded the wall-clock limit of 1.5 s' },
      });
      const received = events.filter((e) => /"content":"[^"]/.test(e)).length;
      expect(received).toBeGreaterThan(0);
      await replica.billing.wallet.flush();
      const now = (await usage()).get('small')!;
      expect(now.requests).toBe(prior.requests + 1);
      expect(now.completion - prior.completion).toBeGreaterThanOrEqual(received);
      expect(now.completion - prior.completion).toBeLessThan(4000);
    } finally {
      await replica.stop();
    }
  }, 60_000);
});
