// Every latency/length knob and every failure mode, set by option and by request header.
import { performance } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import { eventually, openStream, request, sample, scrape, sim, sseData } from './helpers.ts';

const msg = (content = 'Determinism please') => ({
  model: 'test/model',
  messages: [{ role: 'user', content }],
});
const labels = { model_name: 'test/model' };

function contentOf(body: string): string {
  return JSON.parse(body).choices[0].message.content as string;
}

/** Times (ms since the request) at which each SSE event arrived. */
async function eventTimes(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<number[]> {
  const t0 = performance.now();
  const s = await openStream(url, '/v1/chat/completions', body, headers);
  const times: number[] = [];
  s.res.on('data', (c: string) => {
    const n = c.split('\n\n').length - 1;
    for (let i = 0; i < n; i++) times.push(performance.now() - t0);
  });
  await s.ended;
  return times;
}

describe('deterministic output', () => {
  it('is the same for the same prompt and seed, and differs when either changes', async () => {
    const s = await sim({ outputTokens: 16 });
    const get = async (content: string, seed?: number) =>
      contentOf((await request(s.url, '/v1/chat/completions', { body: { ...msg(content), seed } })).body);
    const a = await get('alpha', 1);
    expect(await get('alpha', 1)).toBe(a);
    expect(await get('alpha', 2)).not.toBe(a);
    expect(await get('beta', 1)).not.toBe(a);
    expect(await get('alpha')).toBe(await get('alpha'));
  });
});

describe('latency knobs', () => {
  it('--ttft-ms delays the first token and --itl-ms spaces the rest', async () => {
    const s = await sim({ ttftMs: 120, itlMs: 40, outputTokens: 4 });
    const times = await eventTimes(s.url, { ...msg(), stream: true });
    // role chunk (at TTFT, with the first token), 4 tokens, [DONE]
    expect(times.length).toBeGreaterThanOrEqual(3);
    expect(times[0]!).toBeGreaterThanOrEqual(115);
    // last token at TTFT + 3 ITL
    expect(times.at(-1)!).toBeGreaterThanOrEqual(115 + 3 * 40 - 5);
  });

  it('x-sim-ttft-ms and x-sim-itl-ms override per request', async () => {
    const s = await sim({ ttftMs: 0, itlMs: 0, outputTokens: 3 });
    const times = await eventTimes(
      s.url,
      { ...msg(), stream: true },
      { 'x-sim-ttft-ms': '100', 'x-sim-itl-ms': '30' },
    );
    expect(times[0]!).toBeGreaterThanOrEqual(95);
    expect(times.at(-1)!).toBeGreaterThanOrEqual(95 + 2 * 30 - 5);
  });

  it('non-streaming answers wait TTFT + (n-1) ITL', async () => {
    const s = await sim({ ttftMs: 50, itlMs: 20, outputTokens: 6 });
    const t0 = performance.now();
    const r = await request(s.url, '/v1/chat/completions', { body: msg() });
    expect(r.status).toBe(200);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(145);
  });

  it('--startup-delay-ms keeps /health at 503 until the delay passes', async () => {
    const t0 = performance.now();
    const s = await sim({ startupDelayMs: 200, waitReady: false });
    expect(s.isReady()).toBe(false);
    await s.ready;
    expect(performance.now() - t0).toBeGreaterThanOrEqual(195);
    expect((await request(s.url, '/health')).status).toBe(200);
  });
});

describe('output length', () => {
  it('generates --output-tokens by default, with finish_reason stop', async () => {
    const s = await sim({ outputTokens: 9 });
    const b = JSON.parse((await request(s.url, '/v1/chat/completions', { body: msg() })).body);
    expect(b.usage.completion_tokens).toBe(9);
    expect(b.choices[0].finish_reason).toBe('stop');
  });

  it('honours max_tokens and max_completion_tokens with finish_reason length', async () => {
    const s = await sim({ outputTokens: 9 });
    for (const extra of [
      { max_tokens: 4 },
      { max_completion_tokens: 3 },
      { max_tokens: 50, max_completion_tokens: 2 },
    ]) {
      const b = JSON.parse(
        (await request(s.url, '/v1/chat/completions', { body: { ...msg(), ...extra } })).body,
      );
      expect(b.usage.completion_tokens, JSON.stringify(extra)).toBe(Object.values(extra).at(-1));
      expect(b.choices[0].finish_reason).toBe('length');
    }
    // a larger max_tokens than the natural length ends naturally
    const b = JSON.parse(
      (await request(s.url, '/v1/chat/completions', { body: { ...msg(), max_tokens: 20 } })).body,
    );
    expect(b.usage.completion_tokens).toBe(9);
    expect(b.choices[0].finish_reason).toBe('stop');
  });

  it('ignore_eos generates exactly max_tokens; x-sim-output-tokens sets the natural length', async () => {
    const s = await sim({ outputTokens: 9 });
    const a = JSON.parse(
      (await request(s.url, '/v1/chat/completions', { body: { ...msg(), max_tokens: 30, ignore_eos: true } }))
        .body,
    );
    expect(a.usage.completion_tokens).toBe(30);
    expect(a.choices[0].finish_reason).toBe('length');
    const b = JSON.parse(
      (await request(s.url, '/v1/chat/completions', { body: msg(), headers: { 'x-sim-output-tokens': '2' } }))
        .body,
    );
    expect(b.usage.completion_tokens).toBe(2);
  });

  it('rejects max_tokens below 1', async () => {
    const s = await sim();
    const r = await request(s.url, '/v1/chat/completions', { body: { ...msg(), max_tokens: 0 } });
    expect(r.status).toBe(400);
  });
});

describe('failure modes', () => {
  it('--fail-status answers every generation request with that 5xx in vLLM shape', async () => {
    const s = await sim({ failStatus: 500 });
    const r = await request(s.url, '/v1/chat/completions', { body: msg() });
    expect(r.status).toBe(500);
    expect(JSON.parse(r.body)).toEqual({
      error: { message: 'Internal server error', type: 'InternalServerError', param: null, code: 500 },
    });
    expect((await request(s.url, '/health')).status).toBe(200);
  });

  it('x-sim-fail picks the status per request', async () => {
    const s = await sim();
    const r = await request(s.url, '/v1/completions', {
      body: { prompt: 'x' },
      headers: { 'x-sim-fail': '502' },
    });
    expect(r.status).toBe(502);
    expect(JSON.parse(r.body).error.code).toBe(502);
    expect((await request(s.url, '/v1/completions', { body: { prompt: 'x' } })).status).toBe(200);
  });

  it('--hang accepts and never answers', async () => {
    const s = await sim({ hang: true });
    const ac = new AbortController();
    const pending = request(s.url, '/v1/chat/completions', { body: msg(), signal: ac.signal });
    let settled = false;
    void pending.then(
      () => (settled = true),
      () => (settled = true),
    );
    // The request reached the server (a client-side abort is all that ends it) ...
    await new Promise((r) => setTimeout(r, 200));
    expect(settled).toBe(false);
    ac.abort();
    await expect(pending).rejects.toThrow();
    // ... and the server stays healthy.
    expect((await request(s.url, '/health')).status).toBe(200);
  });

  it('--stall-after-tokens sends some chunks then goes silent with the slot held', async () => {
    const s = await sim({ stallAfterTokens: 3, outputTokens: 10 });
    const st = await openStream(s.url, '/v1/chat/completions', { ...msg(), stream: true });
    await eventually(() => expect(st.text().split('\n\n').length - 1).toBe(4)); // role + 3 tokens
    await new Promise((r) => setTimeout(r, 150));
    expect(st.text().split('\n\n').length - 1).toBe(4);
    expect(st.text()).not.toContain('[DONE]');
    const e = await scrape(s.url);
    expect(sample(e, 'vllm:num_requests_running', labels)).toBe(1);
    expect(sample(e, 'vllm:generation_tokens_total', labels)).toBe(3);
    st.abort();
    await eventually(async () =>
      expect(sample(await scrape(s.url), 'vllm:num_requests_running', labels)).toBe(0),
    );
  });

  it('x-sim-stall-after stalls one request; others complete', async () => {
    const s = await sim({ outputTokens: 5 });
    const st = await openStream(
      s.url,
      '/v1/chat/completions',
      { ...msg(), stream: true },
      { 'x-sim-stall-after': '0' },
    );
    const ok = await request(s.url, '/v1/chat/completions', { body: { ...msg(), stream: true } });
    expect(ok.body.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(st.text()).not.toContain('[DONE]');
    st.abort();
  });

  it('x-sim-error-after sends vLLM error frame then [DONE] after some tokens', async () => {
    const s = await sim({ outputTokens: 10 });
    const r = await request(s.url, '/v1/chat/completions', {
      body: { ...msg(), stream: true },
      headers: { 'x-sim-error-after': '2', 'x-sim-fail': '503' },
    });
    const events = sseData(r.body);
    expect(events).toHaveLength(5); // role, 2 tokens, error, [DONE]
    expect(JSON.parse(events[3]!)).toEqual({
      error: { message: 'Service Unavailable', type: 'ServiceUnavailableError', param: null, code: 503 },
    });
    expect(events[4]).toBe('[DONE]');
  });
});

describe('draining', () => {
  it('close() lets in-flight streams finish, refuses new requests, then resolves', async () => {
    const s = await sim({ ttftMs: 50, itlMs: 20, outputTokens: 5 });
    const st = await openStream(s.url, '/v1/chat/completions', { ...msg(), stream: true });
    await eventually(async () =>
      expect(sample(await scrape(s.url), 'vllm:num_requests_running', labels)).toBe(1),
    );
    const closed = s.close(5000);
    await st.ended;
    expect(st.text().endsWith('data: [DONE]\n\n')).toBe(true);
    await closed;
    await expect(request(s.url, '/health')).rejects.toThrow();
  });

  it('close() cuts requests still running after the grace period', async () => {
    const s = await sim({ hang: true });
    const pending = request(s.url, '/v1/chat/completions', { body: msg() });
    await new Promise((r) => setTimeout(r, 50));
    const t0 = performance.now();
    await s.close(100);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(95);
    await expect(pending).rejects.toThrow();
  });
});
