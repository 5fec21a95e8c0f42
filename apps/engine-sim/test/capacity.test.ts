// The capacity knob (429 like an overloaded hosted upstream) and the runtime knobs a test can turn
// on a running replica: PATCH /sim/config and handle.configure().
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { parseArgs } from '../src/args.ts';
import { ConfigError } from '../src/config.ts';
import { eventually, openStream, request, sample, scrape, sim } from './helpers.ts';

const chat = { model: 'test/model', messages: [{ role: 'user', content: 'hi' }] };
const labels = { model_name: 'test/model' };

describe('--capacity', () => {
  it('answers 429 with an OpenAI-style body and retry-after beyond N requests in flight', async () => {
    const s = await sim({ capacity: 2 });
    const slow = { 'x-sim-ttft-ms': '60000' };
    const held = await Promise.all(
      [0, 1].map(() => openStream(s.url, '/v1/chat/completions', { ...chat, stream: true }, slow)),
    );
    await eventually(async () =>
      expect(sample(await scrape(s.url), 'vllm:num_requests_running', labels)).toBe(2),
    );

    for (const path of ['/v1/chat/completions', '/v1/completions', '/v1/responses', '/v1/embeddings']) {
      const r = await request(s.url, path, { body: { ...chat, prompt: 'x', input: 'x' } });
      expect(r.status, path).toBe(429);
      expect(r.headers['retry-after']).toBe('1');
      expect(JSON.parse(r.body)).toEqual({
        error: {
          message: 'The engine is at capacity (2 requests in flight). Please retry after a short wait.',
          type: 'rate_limit_error',
          param: null,
          code: 'rate_limit_exceeded',
        },
      });
    }
    const err = await new OpenAI({ baseURL: s.url + '/v1', apiKey: 'x', maxRetries: 0 }).chat.completions
      .create({ model: 'test/model', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    // refused requests never reached the engine
    expect(sample(await scrape(s.url), 'vllm:num_requests_waiting', labels)).toBe(0);

    held[0]!.abort();
    await eventually(async () =>
      expect((await request(s.url, '/v1/chat/completions', { body: chat })).status).toBe(200),
    );
    held[1]!.abort();
  });

  it('counts hung requests as in flight', async () => {
    const s = await sim({ capacity: 1 });
    const ac = new AbortController();
    const hung = request(s.url, '/v1/chat/completions', {
      body: chat,
      headers: { 'x-sim-hang': '1' },
      signal: ac.signal,
    });
    hung.catch(() => {});
    await eventually(async () =>
      expect((await request(s.url, '/v1/chat/completions', { body: chat })).status).toBe(429),
    );
    ac.abort();
    await eventually(async () =>
      expect((await request(s.url, '/v1/chat/completions', { body: chat })).status).toBe(200),
    );
  });
});

describe('runtime knobs', () => {
  it('GET /sim/config shows them; PATCH changes them on the running replica', async () => {
    const s = await sim({ outputTokens: 3 });
    const get = await request(s.url, '/sim/config');
    expect(get.status).toBe(200);
    expect(JSON.parse(get.body)).toEqual({
      ttftMs: 0,
      itlMs: 0,
      prefillMsPerToken: 0,
      outputTokens: 3,
      failStatus: null,
      hang: false,
      stallAfterTokens: null,
      errorAfterTokens: null,
      capacity: null,
    });

    // put the replica at capacity, then take it back
    const patched = await request(s.url, '/sim/config', {
      method: 'PATCH',
      body: { capacity: 0, outputTokens: 5 },
    });
    expect(patched.status).toBe(200);
    expect(JSON.parse(patched.body)).toMatchObject({ capacity: 0, outputTokens: 5 });
    expect((await request(s.url, '/v1/chat/completions', { body: chat })).status).toBe(429);
    await request(s.url, '/sim/config', { method: 'PATCH', body: { capacity: null } });
    const ok = await request(s.url, '/v1/chat/completions', { body: chat });
    expect(JSON.parse(ok.body).usage.completion_tokens).toBe(5);

    await request(s.url, '/sim/config', { method: 'PATCH', body: { failStatus: 503 } });
    expect((await request(s.url, '/v1/chat/completions', { body: chat })).status).toBe(503);
  });

  it('refuses a bad patch with 400 naming the knob, and changes nothing', async () => {
    const s = await sim();
    const cases: [unknown, string, string | null][] = [
      [{ capacity: -1 }, "'capacity' must be a non-negative integer or null, got -1", 'capacity'],
      [{ ttftMs: 'fast' }, '\'ttftMs\' must be a non-negative integer, got "fast"', 'ttftMs'],
      [{ failStatus: 200 }, "'failStatus' must be an HTTP status 400-599 or null, got 200", 'failStatus'],
      [{ maxNumSeqs: 4 }, "'maxNumSeqs' is not a runtime knob; runtime knobs: ttftMs, itlMs", 'maxNumSeqs'],
      [{ outputTokens: 0 }, '--output-tokens must be at least 1, got 0', null],
      [[1], 'expected a JSON object of runtime knobs', null],
    ];
    for (const [body, message, param] of cases) {
      const r = await request(s.url, '/sim/config', { method: 'PATCH', body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      const e = JSON.parse(r.body).error;
      expect(e.message).toContain(message);
      expect(e.param).toBe(param);
    }
    expect((await request(s.url, '/sim/config', { method: 'PATCH', body: '{"capacity":' })).status).toBe(400);
    expect((await request(s.url, '/sim/config', { method: 'POST', body: {} })).status).toBe(405);
    expect(JSON.parse((await request(s.url, '/sim/config')).body)).toMatchObject({
      capacity: null,
      ttftMs: 0,
    });
  });

  it('handle.configure() does the same in-process and throws ConfigError on bad values', async () => {
    const s = await sim();
    expect(s.configure({ capacity: 0 })).toMatchObject({ capacity: 0 });
    expect((await request(s.url, '/v1/completions', { body: { prompt: 'x' } })).status).toBe(429);
    expect(() => s.configure({ itlMs: -5 })).toThrow(ConfigError);
    expect(s.configure({})).toMatchObject({ capacity: 0, itlMs: 0 });
  });

  it('the admin routes are off with --no-sim-admin', async () => {
    const s = await sim({ simAdmin: false });
    expect((await request(s.url, '/sim/config')).status).toBe(404);
    expect((await request(s.url, '/reset_prefix_cache', { method: 'POST' })).status).toBe(404);
  });
});

describe('flags', () => {
  it('reads the new knobs from vLLM-style flags and SIM_* variables', () => {
    const { options, ignored } = parseArgs(
      [
        'm',
        '--no-enable-prefix-caching',
        '--block-size',
        '32',
        '--prefill-ms-per-token',
        '0.25',
        '--capacity',
        '8',
        '--enable-prompt-tokens-details',
        '--enable-auto-tool-choice',
        '--tool-call-parser',
        'hermes',
      ],
      { SIM_PREFIX_CACHE_BLOCKS: '100', SIM_EMBEDDING_DIMENSIONS: '1024', SIM_ADMIN: 'false' },
    );
    expect(options).toMatchObject({
      enablePrefixCaching: false,
      blockSize: 32,
      prefillMsPerToken: 0.25,
      capacity: 8,
      enablePromptTokensDetails: true,
      prefixCacheBlocks: 100,
      embeddingDimensions: 1024,
      simAdmin: false,
    });
    expect(ignored).toEqual(['--enable-auto-tool-choice', '--tool-call-parser hermes']);
    expect(parseArgs(['--capacity', 'none'], {}).options.capacity).toBeNull();
    expect(parseArgs([], {}).options).toMatchObject({
      enablePrefixCaching: true,
      blockSize: 16,
      capacity: null,
    });
    expect(() => parseArgs(['--prefill-ms-per-token', '-1'], {})).toThrow(/non-negative number/);
    expect(() => parseArgs(['--block-size', '0'], {})).toThrow(/--block-size must be at least 1/);
  });
});
