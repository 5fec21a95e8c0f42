// /metrics: strict Prometheus text, vLLM's names and labels, values that move with traffic.
import { describe, expect, it } from 'vitest';
import { eventually, openStream, parsePrometheus, request, sample, scrape, sim } from './helpers.ts';

const labels = { model_name: 'test/model' };
const body = { model: 'test/model', messages: [{ role: 'user', content: 'count me' }], stream: true };

describe('/metrics', () => {
  it('is valid exposition text with HELP and TYPE for every vLLM metric', async () => {
    const s = await sim();
    const r = await request(s.url, '/metrics');
    expect(r.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
    const e = parsePrometheus(r.body);
    const expected: Record<string, string> = {
      'vllm:num_requests_running': 'gauge',
      'vllm:num_requests_waiting': 'gauge',
      'vllm:prompt_tokens_total': 'counter',
      'vllm:generation_tokens_total': 'counter',
      'vllm:time_to_first_token_seconds': 'histogram',
      'vllm:inter_token_latency_seconds': 'histogram',
    };
    for (const [name, type] of Object.entries(expected)) {
      expect(e.types.get(name), name).toBe(type);
      expect(e.help.get(name), name).toBeTruthy();
    }
    for (const s of e.samples) expect(s.labels.model_name, s.name).toBe('test/model');
    expect(sample(e, 'vllm:time_to_first_token_seconds_bucket', { le: '+Inf' })).toBe(0);
  });

  it('the strict parser rejects malformed exposition (the check can fail)', () => {
    expect(() => parsePrometheus('vllm:x 1.0\n')).toThrow(/TYPE/);
    expect(() => parsePrometheus('# TYPE a gauge\na{model_name=x} 1\n')).toThrow(/labels/);
    expect(() => parsePrometheus('# TYPE a gauge\na 1,0\n')).toThrow(/sample|value/);
  });

  it('counts prompt and generation tokens and observes TTFT and ITL', async () => {
    const s = await sim({ outputTokens: 6, ttftMs: 30, itlMs: 5 });
    const before = await scrape(s.url);
    expect(sample(before, 'vllm:generation_tokens_total', labels)).toBe(0);
    await request(s.url, '/v1/chat/completions', { body });
    await request(s.url, '/v1/completions', { body: { prompt: 'one two', max_tokens: 3 } });
    const e = await scrape(s.url);
    // chat: "count me" = 2 + 4 + 2 = 8 prompt tokens; completion: 2
    expect(sample(e, 'vllm:prompt_tokens_total', labels)).toBe(10);
    expect(sample(e, 'vllm:generation_tokens_total', labels)).toBe(9);
    expect(sample(e, 'vllm:time_to_first_token_seconds_count', labels)).toBe(2);
    expect(sample(e, 'vllm:time_to_first_token_seconds_sum', labels)).toBeGreaterThanOrEqual(0.055);
    expect(sample(e, 'vllm:inter_token_latency_seconds_count', labels)).toBe(7);
    expect(sample(e, 'vllm:request_success_total', { finished_reason: 'stop' })).toBe(1);
    expect(sample(e, 'vllm:request_success_total', { finished_reason: 'length' })).toBe(1);
    // histogram buckets are cumulative and end at the count
    const buckets = e.samples
      .filter((x) => x.name === 'vllm:time_to_first_token_seconds_bucket')
      .map((x) => x.value);
    expect(buckets).toEqual([...buckets].sort((a, b) => a - b));
    expect(buckets.at(-1)).toBe(2);
  });

  it('shows running and waiting requests against --max-num-seqs', async () => {
    const s = await sim({ maxNumSeqs: 2, outputTokens: 3, ttftMs: 0, itlMs: 0 });
    const slow = { 'x-sim-ttft-ms': '60000' };
    const streams = await Promise.all(
      [0, 1, 2, 3, 4].map(() => openStream(s.url, '/v1/chat/completions', body, slow)),
    );
    await eventually(async () => {
      const e = await scrape(s.url);
      expect(sample(e, 'vllm:num_requests_running', labels)).toBe(2);
      expect(sample(e, 'vllm:num_requests_waiting', labels)).toBe(3);
    });
    // A waiting client that leaves stops counting as waiting.
    streams[4]!.abort();
    await eventually(async () => {
      expect(sample(await scrape(s.url), 'vllm:num_requests_waiting', labels)).toBe(2);
    });
    // Running clients that leave free their slots for the queue.
    streams[0]!.abort();
    streams[1]!.abort();
    await eventually(async () => {
      const e = await scrape(s.url);
      expect(sample(e, 'vllm:num_requests_running', labels)).toBe(2);
      expect(sample(e, 'vllm:num_requests_waiting', labels)).toBe(0);
    });
    streams[2]!.abort();
    streams[3]!.abort();
    await eventually(async () => {
      expect(sample(await scrape(s.url), 'vllm:num_requests_running', labels)).toBe(0);
    });
  });
});
