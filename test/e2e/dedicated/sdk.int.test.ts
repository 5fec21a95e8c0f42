// Calling a dedicated endpoint with the official OpenAI SDK: chat (streaming or not), completions,
// models, engine and auth errors, revocation mid-stream, client aborts, usage metering.
import OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../../support/api.ts';
import { eventually } from '../../support/eventually.ts';
import { sql } from '../../support/postgres.ts';
import {
  api,
  acct,
  other,
  engines,
  json,
  provision,
  waitStatus,
  sdk,
  useDedicatedEndpoints,
} from './fixture.ts';

useDedicatedEndpoints();

let small: string;
beforeAll(async () => {
  const { body } = await provision({
    name: 'my-small',
    model: 'org/small',
    hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
    scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 900 },
  });
  small = body.id;
  await waitStatus(small, 'up', 90_000);
}, 120_000);

describe('calling a dedicated endpoint with the OpenAI SDK', () => {
  it('non-streaming chat completion', async () => {
    const client = sdk(small, acct.inference);
    const r = await client.chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'Hello there' }],
      seed: 7,
    });
    expect(r.object).toBe('chat.completion');
    expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(r.usage).toMatchObject({ prompt_tokens: expect.any(Number), completion_tokens: 16 });
    const again = await client.chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'Hello there' }],
      seed: 7,
    });
    expect(again.choices[0]!.message.content).toBe(r.choices[0]!.message.content);
  });

  it('streaming chat completion: chunks as they come, no usage chunk unless asked', async () => {
    const client = sdk(small, acct.global);
    const stream = await client.chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'Stream it' }],
      stream: true,
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    expect(chunks.every((c) => c.choices.length === 1)).toBe(true);
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('stop');
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);

    const withUsage = await client.chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'Stream it' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage;
    for await (const c of withUsage) if (c.usage) usage = c.usage;
    expect(usage).toMatchObject({ completion_tokens: 16 });
  });

  it('the raw stream is SSE ending with data: [DONE] and a blank line', async () => {
    const res = await fetch(`${api.url}/api/d/${small}/chat/completions`, {
      method: 'POST',
      headers: json(acct.inference),
      body: JSON.stringify({ model: 'org/small', messages: [{ role: 'user', content: 'x' }], stream: true }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await res.text();
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    for (const event of text.split('\n\n').filter(Boolean)) expect(event).toMatch(/^data: /);
    expect(text).not.toContain('"usage":{');
  });

  it('completions and models on the same base', async () => {
    const client = sdk(small, acct.inference);
    const c = await client.completions.create({
      model: 'org/small',
      prompt: 'Once upon a time',
      max_tokens: 5,
    });
    expect(c.usage?.completion_tokens).toBe(5);
    const models = [];
    for await (const m of client.models.list()) models.push(m.id);
    expect(models).toEqual(['org/small']);
  });

  it('engine errors come back in the dual shape with the engine’s message', async () => {
    // A request the engine refuses (past its context length): its 400 and message pass through.
    const res = await fetch(`${api.url}/api/d/${small}/chat/completions`, {
      method: 'POST',
      headers: json(acct.inference),
      body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }], max_tokens: 10_000_000 }),
    });
    expect(res.status).toBe(400);
    const body = await res.json();
    expect(body.error).toMatchObject({ type: 'invalid_request_error' });
    expect(body.error.message).toMatch(/maximum context length/);
    expect(body.message).toBe(body.error.message);
  });

  it('auth errors: missing key 401, wrong account 403 Forbidden: Access denied., compute key 403, unknown id 404', async () => {
    const none = await fetch(`${api.url}/api/d/${small}/chat/completions`, {
      method: 'POST',
      body: '{}',
      headers: { 'content-type': 'application/json' },
    });
    expect(none.status).toBe(401);
    expect((await none.json()).error.message).toBe('Missing or invalid Authorization header');

    const wrong = await sdk(small, other.inference)
      .chat.completions.create({ model: 'org/small', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(wrong).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect((wrong as Error).message).toContain('Forbidden: Access denied.');

    const compute = await sdk(small, acct.compute)
      .chat.completions.create({ model: 'org/small', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(compute).toBeInstanceOf(OpenAI.PermissionDeniedError);

    const bad = await sdk(small, 'svc_live_' + 'z'.repeat(33))
      .chat.completions.create({ model: 'org/small', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.AuthenticationError);

    const unknown = await sdk('endpt-nosuchthing', acct.inference)
      .chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
    expect((unknown as Error).message).toContain('Dedicated endpoint endpt-nosuchthing not found');
  });

  it('a key revoked mid-stream ends the stream with 401 Invalid API key as an SSE error frame', async () => {
    const created = await (
      await fetch(api.url + '/api/keys', {
        method: 'POST',
        headers: json(acct.global),
        body: JSON.stringify({ name: 'doomed', scope: 'inference' }),
      })
    ).json();
    const stream = await sdk(small, created.value).chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'a long story' }],
      stream: true,
      max_tokens: 4000,
      // vLLM's extension: keep generating to max_tokens
      ...({ ignore_eos: true } as object),
    });
    let received = 0;
    const err = await (async () => {
      for await (const _ of stream) {
        if (++received === 3) {
          const del = await fetch(`${api.url}/api/keys/${created.id}`, {
            method: 'DELETE',
            headers: bearer(acct.global),
          });
          expect(del.status).toBe(200);
        }
      }
    })().catch((e: unknown) => e);
    expect(received).toBeGreaterThanOrEqual(3);
    expect(received).toBeLessThan(4000);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as Error).message).toContain('Invalid API key');
  });

  it('a client that goes away aborts the upstream request', async () => {
    const [server] = engines.forEndpoint(small);
    expect(server).toBeDefined();
    const controller = new AbortController();
    const res = await fetch(`${api.url}/api/d/${small}/chat/completions`, {
      method: 'POST',
      headers: json(acct.inference),
      body: JSON.stringify({
        model: 'org/small',
        messages: [{ role: 'user', content: 'x' }],
        stream: true,
        max_tokens: 4000,
        ignore_eos: true,
      }),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    const running = () => server!.metrics.running;
    expect(running()).toBeGreaterThanOrEqual(1);
    controller.abort();
    await eventually(() => expect(running()).toBe(0), { timeout: 5000 });
  });

  it('records usage per endpoint and account, streaming included', async () => {
    await api.usage!.flush();
    const rows = await sql<{ account_id: string; requests: number; completion: number }>(
      api.db.url,
      'SELECT account_id, sum(requests)::int AS requests, sum(completion_tokens)::int AS completion FROM endpoint_usage WHERE endpoint_id = $1 GROUP BY account_id',
      [small],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.account_id).toBe(acct.id);
    // 2 non-streaming + 2 streaming + 1 raw stream (16 tokens each) + 1 completion (5 tokens), at least.
    expect(rows[0]!.requests).toBeGreaterThanOrEqual(6);
    expect(rows[0]!.completion).toBeGreaterThanOrEqual(5 * 16 + 5);
  });
});
