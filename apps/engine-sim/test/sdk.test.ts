// The official openai SDK is the client our users run: it must parse everything the simulator sends.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { sim } from './helpers.ts';

function client(url: string): OpenAI {
  return new OpenAI({ baseURL: url + '/v1', apiKey: 'x', maxRetries: 0 });
}

describe('openai SDK against the simulator', () => {
  it('parses a non-streaming chat completion with usage', async () => {
    const s = await sim({ outputTokens: 12 });
    const r = await client(s.url).chat.completions.create({
      model: 'test/model',
      messages: [{ role: 'user', content: 'Say hello, please.' }],
    });
    expect(r.object).toBe('chat.completion');
    expect(r.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
    expect(r.model).toBe('test/model');
    expect(r.choices).toHaveLength(1);
    expect(r.choices[0]!.message.role).toBe('assistant');
    expect(r.choices[0]!.finish_reason).toBe('stop');
    expect(typeof r.choices[0]!.message.content).toBe('string');
    // "Say hello, please." = 5 tokens, + 4 per message + 2 for the generation prompt.
    expect(r.usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 12, total_tokens: 23 });
  });

  it('streams a chat completion whose deltas add up to the non-streaming content', async () => {
    const s = await sim({ outputTokens: 20 });
    const messages = [{ role: 'user' as const, content: 'Tell me about ports.' }];
    const whole = await client(s.url).chat.completions.create({ model: 'test/model', messages, seed: 7 });
    const stream = await client(s.url).chat.completions.create({
      model: 'test/model',
      messages,
      seed: 7,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    const ids = new Set(chunks.map((c) => c.id));
    expect(ids.size).toBe(1);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true);
    const usageChunk = chunks.at(-1)!;
    expect(usageChunk.choices).toEqual([]);
    expect(usageChunk.usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 20, total_tokens: 31 });
    const last = chunks.at(-2)!;
    expect(last.choices[0]!.finish_reason).toBe('stop');
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    expect(text).toBe(whole.choices[0]!.message.content);
    expect(chunks.filter((c) => c.choices[0]?.delta.content).length).toBe(20);
  });

  it('parses non-streaming and streaming text completions', async () => {
    const s = await sim();
    const c = client(s.url);
    const r = await c.completions.create({ model: 'test/model', prompt: 'Once upon a time', max_tokens: 5 });
    expect(r.object).toBe('text_completion');
    expect(r.id).toMatch(/^cmpl-/);
    expect(r.choices[0]!.finish_reason).toBe('length');
    expect(r.usage).toMatchObject({ prompt_tokens: 4, completion_tokens: 5, total_tokens: 9 });

    const stream = await c.completions.create({
      model: 'test/model',
      prompt: 'Once upon a time',
      max_tokens: 5,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(r.choices[0]!.text);
    expect(usage).toMatchObject({ completion_tokens: 5 });
  });

  it('lists the served model names', async () => {
    const s = await sim({
      model: '/models/llama',
      servedModelNames: ['llama', 'llama-alias'],
      maxModelLen: 2048,
    });
    const page = await client(s.url).models.list();
    expect(page.data.map((m) => m.id)).toEqual(['llama', 'llama-alias']);
    expect(page.data[0]).toMatchObject({
      object: 'model',
      owned_by: 'vllm',
      root: '/models/llama',
      max_model_len: 2048,
    });
  });

  it('surfaces vLLM errors as the SDK error classes', async () => {
    const s = await sim();
    const c = client(s.url);
    const notFound = await c.chat.completions
      .create({ model: 'nope', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(notFound).toBeInstanceOf(OpenAI.NotFoundError);
    expect((notFound as InstanceType<typeof OpenAI.NotFoundError>).message).toContain(
      'The model `nope` does not exist.',
    );

    const failed = await c.chat.completions
      .create(
        { model: 'test/model', messages: [{ role: 'user', content: 'hi' }] },
        { headers: { 'x-sim-fail': '503' } },
      )
      .catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(OpenAI.InternalServerError);
    expect((failed as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
  });

  it('turns a mid-stream error frame into an SDK error', async () => {
    const s = await sim({ outputTokens: 10 });
    const stream = await client(s.url).chat.completions.create(
      { model: 'test/model', messages: [{ role: 'user', content: 'hi' }], stream: true },
      { headers: { 'x-sim-error-after': '3' } },
    );
    let content = 0;
    const err = await (async () => {
      for await (const c of stream) if (c.choices[0]?.delta.content) content++;
    })().catch((e: unknown) => e);
    expect(content).toBe(3);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(String(err)).toContain('Internal server error');
  });
});
