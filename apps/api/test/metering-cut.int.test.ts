// Streams cut short are metered for what was generated (issue 21, item 2): the official OpenAI SDK
// aborts a stream mid-way, and the usage row holds what the engine generated up to the cut,
// while the client saw exactly the bytes it would have seen without the proxy's usage request.
import OpenAI from 'openai';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMemoryProxy, type MemoryProxy } from '@berth/test/support/memory-proxy';
import { eventually } from '@berth/test/support/eventually';
import { sql } from '@berth/test/support/postgres';

let proxy: MemoryProxy;
let sim: Awaited<ReturnType<typeof startEngineSim>>;
let client: OpenAI;
let base: string;
let keyValue: string;

beforeAll(async () => {
  sim = await startEngineSim({ model: 'berth/bench', ttftMs: 0, itlMs: 50, outputTokens: 200 });
  proxy = await startMemoryProxy({ name: 'metering_cut', engines: [sim.url] });
  ({ base, key: keyValue } = proxy);
  client = new OpenAI({ baseURL: base, apiKey: keyValue, maxRetries: 0 });
});

afterAll(async () => {
  await proxy?.close();
  await sim?.close();
});

async function recorded(): Promise<{ requests: number; prompt: number; completion: number }> {
  await proxy.usage.flush();
  const [row] = await sql<{ requests: string; prompt: string; completion: string }>(
    proxy.db.url,
    'SELECT sum(requests) AS requests, sum(prompt_tokens) AS prompt, sum(completion_tokens) AS completion FROM endpoint_usage',
  );
  return {
    requests: Number(row!.requests ?? 0),
    prompt: Number(row!.prompt ?? 0),
    completion: Number(row!.completion ?? 0),
  };
}

describe('a stream cut short', () => {
  it('is metered for the tokens the engine generated before the client left', async () => {
    const before = await recorded();
    const generatedBefore = sim.metrics.generationTokens;
    const stream = await client.chat.completions.create({
      model: 'berth/bench',
      messages: [{ role: 'user', content: 'Count to a thousand' }],
      stream: true,
      max_tokens: 200,
      ignore_eos: true,
    } as OpenAI.ChatCompletionCreateParamsStreaming);
    let contentChunks = 0;
    for await (const chunk of stream) {
      // The client did not ask for usage: it sees none, on any chunk.
      expect(chunk.usage).toBeUndefined();
      if (chunk.choices[0]?.delta.content) contentChunks++;
      if (contentChunks === 10) break; // the SDK aborts the request
    }
    // The simulator stops generating once the proxy cancels its request.
    await eventually(async () => {
      const g = sim.metrics.generationTokens;
      await new Promise((r) => setTimeout(r, 100));
      return sim.metrics.generationTokens === g;
    });
    const generated = sim.metrics.generationTokens - generatedBefore;
    expect(generated).toBeGreaterThanOrEqual(10);
    expect(generated).toBeLessThan(200);
    const after = await eventually(async () => {
      const a = await recorded();
      return a.requests === before.requests + 1 && a;
    });
    // Metered: at least what the client received, at most what the engine generated. The gap is
    // the tokens the engine produced after the proxy's last read and before it saw the cancel (in
    // flight on the connection; the engine reports no count after a cancel): a few ITLs at most.
    const metered = after.completion - before.completion;
    expect(metered).toBeGreaterThanOrEqual(contentChunks);
    expect(metered).toBeLessThanOrEqual(generated);
    expect(generated - metered).toBeLessThanOrEqual(10);
    expect(after.prompt - before.prompt).toBeGreaterThan(0);
  });

  it('a complete stream is metered exactly, and its bytes carry no usage the client did not ask for', async () => {
    const before = await recorded();
    const res = await fetch(`${base}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keyValue}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'berth/bench',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
        max_tokens: 12,
      }),
    });
    const text = await res.text();
    expect(text).not.toContain('"usage"');
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    const after = await recorded();
    expect(after.requests - before.requests).toBe(1);
    expect(after.completion - before.completion).toBe(12);
  });

  it('a client that asked for continuous usage gets it on every chunk', async () => {
    const res = await fetch(`${base}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keyValue}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'berth/bench',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
        max_tokens: 4,
        stream_options: { include_usage: true, continuous_usage_stats: true },
      }),
    });
    const events = (await res.text()).split('\n\n').filter((e) => e && e !== 'data: [DONE]');
    expect(events.length).toBeGreaterThanOrEqual(5);
    for (const e of events) expect(JSON.parse(e.slice(6)).usage).toBeDefined();
  });
});
