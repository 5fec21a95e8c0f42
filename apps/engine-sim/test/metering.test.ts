// Exact metering: stream_options.continuous_usage_stats (usage on every chunk, as vLLM sends it) and
// the simulator's own token counters, which count exactly what it generated — streams cut by the
// client included — so a metering proxy's records can be compared with them.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { eventually, openStream, request, sample, scrape, sim, sseData, until } from './helpers.ts';

const labels = { model_name: 'test/model' };
const messages = [{ role: 'user', content: 'Count with me' }]; // 3 tokens + 4 + 2 = 9 prompt tokens

async function tokenCounters(url: string): Promise<{ prompt: number; generation: number }> {
  const e = await scrape(url);
  return {
    prompt: sample(e, 'vllm:prompt_tokens_total', labels),
    generation: sample(e, 'vllm:generation_tokens_total', labels),
  };
}

describe('continuous_usage_stats', () => {
  it('puts the running usage on every chat chunk, then the final usage chunk', async () => {
    const s = await sim({ outputTokens: 4 });
    const r = await request(s.url, '/v1/chat/completions', {
      body: {
        model: 'test/model',
        messages,
        stream: true,
        stream_options: { include_usage: true, continuous_usage_stats: true },
      },
    });
    const chunks = sseData(r.body)
      .slice(0, -1)
      .map((e) => JSON.parse(e));
    expect(chunks).toHaveLength(6); // role + 4 tokens + usage
    expect(chunks.map((c) => c.usage)).toEqual(
      [0, 1, 2, 3, 4, 4].map((n) => ({ prompt_tokens: 9, total_tokens: 9 + n, completion_tokens: n })),
    );
    expect(chunks[4].choices[0].finish_reason).toBe('stop');
    expect(chunks[5].choices).toEqual([]);
  });

  it('does the same for text completions, and is ignored without include_usage (as in vLLM)', async () => {
    const s = await sim({ outputTokens: 3 });
    const r = await request(s.url, '/v1/completions', {
      body: {
        prompt: 'a b',
        stream: true,
        stream_options: { include_usage: true, continuous_usage_stats: true },
      },
    });
    const usage = sseData(r.body)
      .slice(0, -1)
      .map((e) => JSON.parse(e).usage.completion_tokens);
    expect(usage).toEqual([1, 2, 3, 3]);

    const without = await request(s.url, '/v1/completions', {
      body: { prompt: 'a b', stream: true, stream_options: { continuous_usage_stats: true } },
    });
    expect(without.body).not.toContain('"usage"');
  });

  it('parses in the official SDK', async () => {
    const s = await sim({ outputTokens: 5 });
    const stream = await new OpenAI({
      baseURL: s.url + '/v1',
      apiKey: 'x',
      maxRetries: 0,
    }).chat.completions.create({
      model: 'test/model',
      messages: [{ role: 'user', content: 'Count with me' }],
      stream: true,
      stream_options: {
        include_usage: true,
        continuous_usage_stats: true,
      } as OpenAI.ChatCompletionStreamOptions,
    });
    const seen: number[] = [];
    for await (const c of stream) seen.push(c.usage!.completion_tokens);
    expect(seen).toEqual([0, 1, 2, 3, 4, 5, 5]);
  });
});

describe('the simulator’s own counters', () => {
  it('count what completed requests reported in usage, streamed or not', async () => {
    const s = await sim({ outputTokens: 6 });
    const a = JSON.parse(
      (await request(s.url, '/v1/chat/completions', { body: { model: 'test/model', messages } })).body,
    );
    const b = await request(s.url, '/v1/chat/completions', {
      body: {
        model: 'test/model',
        messages,
        stream: true,
        stream_options: { include_usage: true },
        max_tokens: 4,
      },
    });
    const bUsage = JSON.parse(sseData(b.body).at(-2)!).usage;
    expect(await tokenCounters(s.url)).toEqual({
      prompt: a.usage.prompt_tokens + bUsage.prompt_tokens,
      generation: a.usage.completion_tokens + bUsage.completion_tokens,
    });
  });

  it('count exactly the tokens of a stream the client cut, matching its last running usage', async () => {
    const s = await sim({ outputTokens: 100, itlMs: 250 });
    const st = await openStream(s.url, '/v1/chat/completions', {
      model: 'test/model',
      messages,
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    });
    // Leave as soon as the fifth token arrives. Tokens come 250 ms apart, so none is on its way
    // unless the machine stalls this process for that long.
    await until(st, () => st.text().split('\n\n').length - 1 >= 6);
    st.abort();
    const events = st.text().split('\n\n').slice(0, -1);
    const last = JSON.parse(events.at(-1)!.slice('data: '.length));
    await new Promise((r) => setTimeout(r, 300)); // longer than a token: the cut must stop generation
    const counted = await tokenCounters(s.url);
    expect(counted).toEqual({ prompt: 9, generation: last.usage.completion_tokens });
    expect(counted.generation).toBe(events.length - 1); // every content chunk, nothing more
    const e = await scrape(s.url);
    expect(sample(e, 'vllm:num_requests_running', labels)).toBe(0);
  });

  it('count a stalled stream’s tokens and nothing more once the client gives up', async () => {
    const s = await sim({ outputTokens: 50 });
    const st = await openStream(
      s.url,
      '/v1/completions',
      { prompt: 'x', stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } },
      { 'x-sim-stall-after': '7' },
    );
    await until(st, () => st.text().split('\n\n').length - 1 >= 7);
    st.abort();
    await new Promise((r) => setTimeout(r, 50));
    expect((await tokenCounters(s.url)).generation).toBe(7);
    expect(JSON.parse(st.text().split('\n\n')[6]!.slice(6)).usage.completion_tokens).toBe(7);
  });

  it('count a request that waited in the queue and left before its turn as nothing', async () => {
    const s = await sim({ maxNumSeqs: 1 });
    const first = await openStream(
      s.url,
      '/v1/chat/completions',
      { model: 'test/model', messages, stream: true },
      {
        'x-sim-ttft-ms': '60000',
      },
    );
    const queued = await openStream(s.url, '/v1/chat/completions', {
      model: 'test/model',
      messages,
      stream: true,
    });
    await eventually(async () =>
      expect(sample(await scrape(s.url), 'vllm:num_requests_waiting', labels)).toBe(1),
    );
    queued.abort();
    await eventually(async () =>
      expect(sample(await scrape(s.url), 'vllm:num_requests_waiting', labels)).toBe(0),
    );
    first.abort();
    await eventually(async () =>
      expect(sample(await scrape(s.url), 'vllm:num_requests_running', labels)).toBe(0),
    );
    // only the first was scheduled (its prompt was prefilled); neither generated anything
    expect(await tokenCounters(s.url)).toEqual({ prompt: 9, generation: 0 });
  });
});
