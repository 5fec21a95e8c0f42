// Raw bytes on the wire: SSE framing, vLLM's chunk fields, error bodies and status codes.
import { describe, expect, it } from 'vitest';
import { request, sim, sseData } from './helpers.ts';

const chat = (extra: Record<string, unknown> = {}) => ({
  model: 'test/model',
  messages: [{ role: 'user', content: 'Hello there' }],
  ...extra,
});

describe('SSE framing', () => {
  it('sends data lines separated by blank lines, ending in [DONE] and a blank line', async () => {
    const s = await sim({ outputTokens: 5 });
    const r = await request(s.url, '/v1/chat/completions', {
      body: chat({ stream: true, stream_options: { include_usage: true } }),
    });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(r.body.endsWith('data: [DONE]\n\n')).toBe(true);
    const events = sseData(r.body);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    // role chunk + 5 content chunks + usage chunk
    expect(chunks).toHaveLength(7);
    for (const c of chunks) {
      expect(c.id).toBe(chunks[0].id);
      expect(c.object).toBe('chat.completion.chunk');
      expect(c.model).toBe('test/model');
      expect(Number.isInteger(c.created)).toBe(true);
    }
    expect(chunks[0].choices[0]).toEqual({
      index: 0,
      delta: { role: 'assistant', content: '' },
      logprobs: null,
      finish_reason: null,
    });
    expect(chunks[1].choices[0]).toMatchObject({ index: 0, logprobs: null, finish_reason: null });
    expect(chunks[5].choices[0]).toMatchObject({ finish_reason: 'stop', stop_reason: null });
    expect(chunks[6]).toMatchObject({
      choices: [],
      usage: { prompt_tokens: 8, completion_tokens: 5, total_tokens: 13 },
    });
  });

  it('omits the usage chunk unless stream_options.include_usage is set', async () => {
    const s = await sim({ outputTokens: 3 });
    const r = await request(s.url, '/v1/chat/completions', { body: chat({ stream: true }) });
    const chunks = sseData(r.body)
      .slice(0, -1)
      .map((e) => JSON.parse(e));
    expect(chunks).toHaveLength(4);
    expect(chunks.some((c) => 'usage' in c)).toBe(false);
  });

  it('streams text completions with text, logprobs, finish_reason and stop_reason on every chunk', async () => {
    const s = await sim({ outputTokens: 3 });
    const r = await request(s.url, '/v1/completions', { body: { prompt: 'abc', stream: true } });
    const chunks = sseData(r.body)
      .slice(0, -1)
      .map((e) => JSON.parse(e));
    expect(chunks).toHaveLength(3);
    for (const c of chunks) {
      expect(c.object).toBe('text_completion');
      expect(Object.keys(c.choices[0])).toEqual([
        'index',
        'text',
        'logprobs',
        'finish_reason',
        'stop_reason',
      ]);
    }
    expect(chunks.map((c) => c.choices[0].finish_reason)).toEqual([null, null, 'stop']);
  });
});

describe('non-streaming bodies', () => {
  it('carries vLLM fields such as system_fingerprint and stop_reason', async () => {
    const s = await sim({ outputTokens: 4 });
    const r = await request(s.url, '/v1/chat/completions', { body: chat({ max_tokens: 2 }) });
    expect(r.status).toBe(200);
    const b = JSON.parse(r.body);
    expect(b).toMatchObject({ object: 'chat.completion', system_fingerprint: null, model: 'test/model' });
    expect(b.choices[0]).toMatchObject({
      index: 0,
      logprobs: null,
      finish_reason: 'length',
      stop_reason: null,
    });
    expect(b.usage).toEqual({
      prompt_tokens: 8,
      total_tokens: 10,
      completion_tokens: 2,
      prompt_tokens_details: null,
    });
  });
});

describe('errors as vLLM sends them', () => {
  it('404 for an unknown model, with vLLM message and ErrorResponse shape', async () => {
    const s = await sim();
    const r = await request(s.url, '/v1/chat/completions', { body: chat({ model: 'x' }) });
    expect(r.status).toBe(404);
    expect(JSON.parse(r.body)).toEqual({
      error: { message: 'The model `x` does not exist.', type: 'NotFoundError', param: 'model', code: 404 },
    });
  });

  it('400 for invalid JSON and for missing messages or prompt', async () => {
    const s = await sim();
    for (const [path, body] of [
      ['/v1/chat/completions', '{"model": '],
      ['/v1/chat/completions', { model: 'test/model' }],
      ['/v1/chat/completions', { model: 'test/model', messages: 'hi' }],
      ['/v1/completions', { model: 'test/model' }],
      ['/v1/chat/completions', '[1,2]'],
    ] as const) {
      const r = await request(s.url, path, { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      const e = JSON.parse(r.body).error;
      expect(e).toMatchObject({ type: 'Bad Request', code: 400 });
      expect(typeof e.message).toBe('string');
    }
    const missing = await request(s.url, '/v1/chat/completions', { body: { model: 'test/model' } });
    expect(JSON.parse(missing.body).error.message).toContain(
      "'loc': ('body', 'messages'), 'msg': 'Field required'",
    );
  });

  it('400 with vLLM wording when the prompt exceeds --max-model-len', async () => {
    const s = await sim({ maxModelLen: 10 });
    const r = await request(s.url, '/v1/completions', {
      body: { prompt: 'one two three four five six seven eight nine ten' },
    });
    expect(r.status).toBe(400);
    expect(JSON.parse(r.body).error).toEqual({
      message:
        "This model's maximum context length is 10 tokens. However, your request has 10 input tokens. " +
        'Please reduce the length of the input messages. (parameter=input_tokens, value=10)',
      type: 'BadRequestError',
      param: 'input_tokens',
      code: 400,
    });
  });

  it('400 when prompt plus max_tokens exceeds --max-model-len', async () => {
    const s = await sim({ maxModelLen: 10 });
    const r = await request(s.url, '/v1/completions', { body: { prompt: 'a b c', max_tokens: 8 } });
    expect(r.status).toBe(400);
    const e = JSON.parse(r.body).error;
    expect(e.message).toMatch(
      /^'max_tokens' or 'max_completion_tokens' is too large: 8\. This model's maximum context length is 10 tokens and your request has 3 input tokens \(8 > 10 - 3\)\./,
    );
    expect(e.param).toBe('max_tokens');
  });

  it('404 and 405 for unknown routes and methods, like FastAPI', async () => {
    const s = await sim();
    expect((await request(s.url, '/v1/nope')).status).toBe(404);
    const r = await request(s.url, '/v1/chat/completions', { method: 'GET' });
    expect(r.status).toBe(405);
  });
});

describe('/health and /v1/models', () => {
  it('/health answers 503 while loading, then 200', async () => {
    const s = await sim({ startupDelayMs: 300, waitReady: false });
    const early = await request(s.url, '/health');
    expect(early.status).toBe(503);
    const earlyChat = await request(s.url, '/v1/chat/completions', { body: chat() });
    expect(earlyChat.status).toBe(503);
    await s.ready;
    expect((await request(s.url, '/health')).status).toBe(200);
    expect((await request(s.url, '/v1/chat/completions', { body: chat() })).status).toBe(200);
  });

  it('binds the given loopback address', async () => {
    const s = await sim({ host: '127.16.0.5' });
    expect(s.url).toMatch(/^http:\/\/127\.16\.0\.5:\d+$/);
    expect((await request(s.url, '/health')).status).toBe(200);
  });
});
