// The prefix cache: blocks of the prompt (and of answers) kept per replica in LRU order, hits that
// skip prefill time, and vLLM's vllm:prefix_cache_queries/hits counters (in tokens) moving with them.
import { performance } from 'node:perf_hooks';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { PrefixCache } from '../src/prefix-cache.ts';
import { BlockHasher, chatPrompt, completionPrompt, tokenId } from '../src/text.ts';
import { openStream, request, sample, scrape, sim, until } from './helpers.ts';

const labels = { model_name: 'test/model' };

function client(url: string): OpenAI {
  return new OpenAI({ baseURL: url + '/v1', apiKey: 'x', maxRetries: 0 });
}

/** A prompt of exactly n tokens (n distinct words). */
function words(n: number, tag = 'w'): string {
  return Array.from({ length: n }, (_, i) => `${tag}${i}`).join(' ');
}

async function counters(url: string): Promise<{ queries: number; hits: number }> {
  const e = await scrape(url);
  return {
    queries: sample(e, 'vllm:prefix_cache_queries_total', labels),
    hits: sample(e, 'vllm:prefix_cache_hits_total', labels),
  };
}

describe('block hashing', () => {
  it('keys full blocks by everything before them; equal prefixes give equal keys', () => {
    const blocks = (text: string) => completionPrompt(text, new BlockHasher(4)).hasher!.blocks;
    const a = blocks('a b c d e f g h i j');
    expect(a).toHaveLength(2); // 10 tokens: two full blocks of 4, the rest unkeyed
    expect(blocks('a b c d e f g h x y')).toEqual(a);
    const changedFirst = blocks('z b c d e f g h i j');
    expect(changedFirst[0]).not.toBe(a[0]);
    expect(changedFirst[1]).not.toBe(a[1]); // a block's key depends on the blocks before it
    expect(blocks('a b c d z f g h')[0]).toBe(a[0]);
    expect(new Set([...a, ...changedFirst]).size).toBe(4);
  });

  it('a chat history is a prefix of its continuation, answer included', () => {
    const turn1 = [{ role: 'user', content: words(30) }];
    const first = chatPrompt(turn1, new BlockHasher(16));
    const answer = 'Sure, here it is.';
    const second = chatPrompt(
      [...turn1, { role: 'assistant', content: answer }, { role: 'user', content: 'more' }],
      new BlockHasher(16),
    );
    // what the engine hashed after answering turn 1: the prompt, then the answer's tokens
    for (const piece of ['Sure', ',', 'here', 'it', 'is', '.']) first.hasher!.push(tokenId(piece));
    expect(second.hasher!.blocks.slice(0, first.hasher!.blocks.length)).toEqual(first.hasher!.blocks);
  });
});

describe('the LRU', () => {
  it('matches leading blocks only, up to the limit', () => {
    const c = new PrefixCache(10);
    c.insert([1, 2, 3]);
    expect(c.match([1, 2, 3, 4], 10)).toBe(3);
    expect(c.match([1, 2, 3, 4], 2)).toBe(2);
    expect(c.match([9, 2, 3], 10)).toBe(0);
    expect(c.match([1, 9, 3], 10)).toBe(1);
  });

  it('evicts the least recently used, a sequence’s tail before its head', () => {
    const c = new PrefixCache(4);
    c.insert([1, 2, 3]);
    c.insert([7, 8]); // over capacity by one: block 3 (the old sequence's tail) goes
    expect(c.size).toBe(4);
    expect(c.match([1, 2, 3], 10)).toBe(2);
    expect(c.match([7, 8], 10)).toBe(2);
    c.insert([1, 2]); // refresh the head: 7 and 8 are now the oldest
    c.insert([5, 6]);
    expect(c.match([1, 2], 10)).toBe(2);
    expect(c.match([7, 8], 10)).toBe(0);
    c.reset();
    expect(c.size).toBe(0);
  });

  it('behaves like a plain reference LRU over 20,000 random operations (index collisions included)', () => {
    // Reference: an array, most recent first.
    let seed = 12345;
    const rand = (n: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed % n;
    };
    for (const capacity of [1, 5, 64]) {
      const c = new PrefixCache(capacity);
      let ref: number[] = [];
      // 53-bit keys from a small pool, so lookups hit, miss and collide in the index
      const pool = Array.from({ length: capacity * 3 + 2 }, (_, i) => i * 0x100000001 + (i % 3) * 2 ** 40);
      for (let op = 0; op < 20_000; op++) {
        if (rand(10) === 0) {
          const probe = Array.from({ length: 1 + rand(4) }, () => pool[rand(pool.length)]!);
          let n = 0;
          while (n < probe.length && ref.includes(probe[n]!)) n++;
          expect(c.match(probe, 10)).toBe(n);
          continue;
        }
        const blocks = Array.from({ length: 1 + rand(3) }, () => pool[rand(pool.length)]!);
        c.insert(blocks);
        for (let i = blocks.length - 1; i >= 0; i--)
          ref = [blocks[i]!, ...ref.filter((k) => k !== blocks[i])];
        ref = ref.slice(0, capacity);
        expect(c.size).toBe(ref.length);
      }
      for (const k of pool) expect(c.match([k], 1), `key ${k}`).toBe(ref.includes(k) ? 1 : 0);
    }
  });

  it('with capacity 0 keeps nothing', () => {
    const c = new PrefixCache(0);
    c.insert([1, 2]);
    expect(c.match([1, 2], 10)).toBe(0);
  });
});

describe('on the server', () => {
  it('counts queried and hit tokens like vLLM: whole blocks, at most prompt - 1', async () => {
    const s = await sim({ outputTokens: 2 });
    expect(await counters(s.url)).toEqual({ queries: 0, hits: 0 });
    const prompt = words(40);
    await request(s.url, '/v1/completions', { body: { prompt } });
    expect(await counters(s.url)).toEqual({ queries: 40, hits: 0 });
    await request(s.url, '/v1/completions', { body: { prompt } });
    expect(await counters(s.url)).toEqual({ queries: 80, hits: 32 }); // 2 full blocks of 16
    // exactly 32 tokens: the last token is always recomputed, so only the first block can hit
    await request(s.url, '/v1/completions', { body: { prompt: words(32) } });
    expect(await counters(s.url)).toEqual({ queries: 112, hits: 48 });
    // a different first token misses everything
    await request(s.url, '/v1/completions', { body: { prompt: 'x ' + prompt } });
    expect((await counters(s.url)).hits).toBe(48);
  });

  it('reports cached tokens in usage (Responses always; chat with --enable-prompt-tokens-details)', async () => {
    const s = await sim({ enablePromptTokensDetails: true });
    const c = client(s.url);
    const messages = [{ role: 'user' as const, content: words(50) }];
    const first = await c.chat.completions.create({ model: 'test/model', messages });
    expect(first.usage!.prompt_tokens_details).toEqual({ cached_tokens: 0 });
    const second = await c.chat.completions.create({ model: 'test/model', messages });
    expect(second.usage!.prompt_tokens).toBe(56);
    expect(second.usage!.prompt_tokens_details).toEqual({ cached_tokens: 48 });

    const r1 = await c.responses.create({ model: 'test/model', input: words(40, 'r') });
    const r2 = await c.responses.create({ model: 'test/model', input: words(40, 'r') });
    expect(r1.usage!.input_tokens_details.cached_tokens).toBe(0);
    expect(r2.usage!.input_tokens_details.cached_tokens).toBe(32);
  });

  it('caches an answer’s blocks, so the next turn of a conversation hits through it', async () => {
    const s = await sim({ outputTokens: 40 });
    const c = client(s.url);
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: words(20) }];
    const a = await c.chat.completions.create({ model: 'test/model', messages });
    expect(a.usage!.prompt_tokens).toBe(26);
    messages.push(a.choices[0]!.message, { role: 'user', content: words(10, 'q') });
    const before = await counters(s.url);
    const b = await c.chat.completions.create({ model: 'test/model', messages });
    // 26 prompt + 40 answer tokens = 66 were cached as 4 full blocks; turn 2 has 26 + 40 + 2 + 14 + 2 tokens
    expect(b.usage!.prompt_tokens).toBe(84);
    expect((await counters(s.url)).hits - before.hits).toBe(64);
  });

  it('caches the part of a stream the client received before leaving', async () => {
    const s = await sim({ outputTokens: 200, itlMs: 5 });
    const prompt = words(16);
    const st = await openStream(s.url, '/v1/completions', { prompt, stream: true });
    await until(st, () => st.text().split('\n\n').length > 40);
    st.abort();
    await new Promise((r) => setTimeout(r, 50));
    // The answer so far continues the prompt: prompt + what was received hits its full blocks.
    const received = st
      .text()
      .split('\n\n')
      .filter((e) => e.startsWith('data: {'))
      .map((e) => JSON.parse(e.slice(6)).choices[0].text as string);
    const before = await counters(s.url);
    await request(s.url, '/v1/completions', {
      body: { prompt: prompt + ' ' + received.join(''), max_tokens: 1 },
    });
    const tokens = 16 + received.length;
    expect((await counters(s.url)).hits - before.hits).toBe(16 * Math.floor((tokens - 1) / 16));
    expect(tokens).toBeGreaterThan(48);
  });

  it('cached tokens skip prefill: TTFT shrinks with --prefill-ms-per-token', async () => {
    const s = await sim({ prefillMsPerToken: 2, outputTokens: 1 });
    const prompt = words(300);
    const t0 = performance.now();
    await request(s.url, '/v1/completions', { body: { prompt } });
    const cold = performance.now() - t0;
    const t1 = performance.now();
    await request(s.url, '/v1/completions', { body: { prompt } });
    const warm = performance.now() - t1;
    expect(cold).toBeGreaterThanOrEqual(595); // 300 tokens × 2 ms
    expect(warm).toBeLessThan(cold / 2); // 288 cached: 12 tokens × 2 ms, plus whatever the machine adds
  });

  it('is off with --no-enable-prefix-caching, empties on POST /reset_prefix_cache, forgets past its capacity', async () => {
    const off = await sim({ enablePrefixCaching: false });
    await request(off.url, '/v1/completions', { body: { prompt: words(40) } });
    await request(off.url, '/v1/completions', { body: { prompt: words(40) } });
    expect(await counters(off.url)).toEqual({ queries: 0, hits: 0 });

    const s = await sim();
    await request(s.url, '/v1/completions', { body: { prompt: words(40) } });
    expect((await request(s.url, '/reset_prefix_cache', { method: 'POST' })).status).toBe(200);
    await request(s.url, '/v1/completions', { body: { prompt: words(40) } });
    expect((await counters(s.url)).hits).toBe(0);

    const small = await sim({ prefixCacheBlocks: 2, outputTokens: 1 });
    await request(small.url, '/v1/completions', { body: { prompt: words(40, 'a') } });
    await request(small.url, '/v1/completions', { body: { prompt: words(40, 'b') } }); // evicts a's blocks
    await request(small.url, '/v1/completions', { body: { prompt: words(40, 'a') } });
    expect((await counters(small.url)).hits).toBe(0);
  });
});
