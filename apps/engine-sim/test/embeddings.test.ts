// POST /v1/embeddings: vLLM's EmbeddingResponse, deterministic unit vectors, float and base64.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { embed } from '../src/embeddings.ts';
import { request, sample, scrape, sim } from './helpers.ts';

function client(url: string): OpenAI {
  return new OpenAI({ baseURL: url + '/v1', apiKey: 'x', maxRetries: 0 });
}

const labels = { model_name: 'test/model' };

function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let dot = 0;
  for (let i = 0; i < a.length; i++) dot += a[i]! * b[i]!;
  return dot; // unit vectors
}

function norm(a: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * a[i]!;
  return Math.sqrt(s);
}

describe('/v1/embeddings', () => {
  it('answers vLLM’s body: one unit vector per input, usage in prompt tokens', async () => {
    const s = await sim({ embeddingDimensions: 64 });
    const r = await request(s.url, '/v1/embeddings', {
      body: { model: 'test/model', input: ['Hello, world!', 'one two three'], encoding_format: 'float' },
    });
    expect(r.status).toBe(200);
    const b = JSON.parse(r.body);
    expect(b.id).toMatch(/^embd-[0-9a-f]{32}$/);
    expect(b).toMatchObject({ object: 'list', model: 'test/model' });
    expect(b.data.map((d: { index: number; object: string }) => [d.index, d.object])).toEqual([
      [0, 'embedding'],
      [1, 'embedding'],
    ]);
    for (const d of b.data) {
      expect(d.embedding).toHaveLength(64);
      expect(norm(d.embedding)).toBeCloseTo(1, 5);
    }
    // "Hello, world!" = 4 tokens, "one two three" = 3
    expect(b.usage).toEqual({
      prompt_tokens: 7,
      total_tokens: 7,
      completion_tokens: 0,
      prompt_tokens_details: null,
    });
    expect(b.data[0].embedding).toEqual(Array.from(embed('Hello, world!', 64)));
    const e = await scrape(s.url);
    expect(sample(e, 'vllm:prompt_tokens_total', labels)).toBe(7);
    expect(sample(e, 'vllm:request_success_total', { ...labels, finished_reason: 'stop' })).toBe(1);
  });

  it('is deterministic, and texts sharing words are closer than texts that share none', () => {
    const a = embed('the quick brown fox', 256);
    expect(embed('the quick brown fox', 256)).toEqual(a);
    expect(embed('The QUICK brown fox', 256)).toEqual(a); // case does not matter
    const near = cosine(a, embed('a quick brown dog', 256));
    const far = cosine(a, embed('interest rates rose sharply', 256));
    expect(near).toBeGreaterThan(0.3);
    expect(near).toBeGreaterThan(far + 0.2);
  });

  it('gives the official SDK (base64 by default) the same float32 values as encoding_format float', async () => {
    const s = await sim();
    const c = client(s.url);
    const decoded = await c.embeddings.create({ model: 'test/model', input: 'ports and harbours' });
    const floats = await c.embeddings.create({
      model: 'test/model',
      input: 'ports and harbours',
      encoding_format: 'float',
    });
    expect(decoded.data[0]!.embedding).toHaveLength(384);
    expect(Array.from(decoded.data[0]!.embedding)).toEqual(floats.data[0]!.embedding);
    expect(decoded.usage).toEqual({
      prompt_tokens: 3,
      total_tokens: 3,
      completion_tokens: 0,
      prompt_tokens_details: null,
    });

    const raw = await request(s.url, '/v1/embeddings', {
      body: { model: 'test/model', input: 'ports and harbours', encoding_format: 'base64' },
    });
    const b64: string = JSON.parse(raw.body).data[0].embedding;
    const buf = Buffer.from(b64, 'base64');
    expect(buf.length).toBe(384 * 4);
    expect(buf.readFloatLE(0)).toBe(floats.data[0]!.embedding[0]);
  });

  it('accepts token ids, and dimensions shortens the vector', async () => {
    const s = await sim();
    const c = client(s.url);
    const ids = await c.embeddings.create({
      model: 'test/model',
      input: [
        [1, 2, 3],
        [4, 5],
      ],
      encoding_format: 'float',
    });
    expect(ids.data).toHaveLength(2);
    expect(ids.usage.prompt_tokens).toBe(5);
    const short = await c.embeddings.create({
      model: 'test/model',
      input: 'x y',
      dimensions: 32,
      encoding_format: 'float',
    });
    expect(short.data[0]!.embedding).toHaveLength(32);
    expect(norm(short.data[0]!.embedding)).toBeCloseTo(1, 5);
  });

  it('refuses bad input with 400 and an unknown model with 404, before any work', async () => {
    const s = await sim({ maxModelLen: 20, embeddingDimensions: 16 });
    const cases: [unknown, number, string][] = [
      [{ model: 'test/model' }, 400, "'loc': ('body', 'input'), 'msg': 'Field required'"],
      [{ model: 'test/model', input: [] }, 400, 'List should have at least 1 item'],
      [{ model: 'test/model', input: [1, 'a'] }, 400, 'Input should be a string'],
      [
        { model: 'test/model', input: 'x', encoding_format: 'hex' },
        400,
        "Input should be 'float' or 'base64'",
      ],
      [
        { model: 'test/model', input: 'x', dimensions: 17 },
        400,
        'dimensions must be between 1 and 16, got 17.',
      ],
      [
        { model: 'test/model', input: 'a '.repeat(25) },
        400,
        "This model's maximum context length is 20 tokens. However, you requested 25 tokens in the input for embedding generation.",
      ],
      [{ model: 'other', input: 'x' }, 404, 'The model `other` does not exist.'],
      ['{"input": ', 400, 'JSON decode error'],
    ];
    for (const [body, status, message] of cases) {
      const r = await request(s.url, '/v1/embeddings', { body });
      expect(r.status, JSON.stringify(body)).toBe(status);
      expect(JSON.parse(r.body).error.message).toContain(message);
    }
    expect(sample(await scrape(s.url), 'vllm:prompt_tokens_total', labels)).toBe(0);
  });

  it('takes a scheduler slot for its prefill time and honours the failure knobs', async () => {
    const s = await sim({ maxNumSeqs: 1 });
    const slow = request(s.url, '/v1/embeddings', {
      body: { model: 'test/model', input: 'x' },
      headers: { 'x-sim-ttft-ms': '300' },
    });
    await new Promise((r) => setTimeout(r, 50));
    const e = await scrape(s.url);
    expect(sample(e, 'vllm:num_requests_running', labels)).toBe(1);
    expect((await slow).status).toBe(200);
    const failed = await request(s.url, '/v1/embeddings', {
      body: { model: 'test/model', input: 'x' },
      headers: { 'x-sim-fail': '503' },
    });
    expect(failed.status).toBe(503);
  });
});
