// POST /v1/responses: vLLM's response object and typed stream events, checked on the wire and
// through the official SDK's strict stream accumulator.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { openStream, request, sample, scrape, sim, sseEvents, until } from './helpers.ts';

function client(url: string): OpenAI {
  return new OpenAI({ baseURL: url + '/v1', apiKey: 'x', maxRetries: 0 });
}

const labels = { model_name: 'test/model' };

describe('non-streaming responses', () => {
  it('answers with vLLM’s response object, the request echoed, one message and usage', async () => {
    const s = await sim({ outputTokens: 7, maxModelLen: 1000 });
    const r = await request(s.url, '/v1/responses', {
      body: {
        model: 'test/model',
        input: 'Tell me about ports.',
        instructions: 'Be brief.',
        metadata: { a: '1' },
      },
    });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('application/json');
    const b = JSON.parse(r.body);
    expect(b.id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(b).toMatchObject({
      object: 'response',
      model: 'test/model',
      status: 'completed',
      incomplete_details: null,
      instructions: 'Be brief.',
      metadata: { a: '1' },
      tool_choice: 'auto',
      tools: [],
      parallel_tool_calls: true,
      background: false,
      previous_response_id: null,
      service_tier: 'auto',
      truncation: 'disabled',
    });
    expect(b.output).toHaveLength(1);
    const item = b.output[0];
    expect(item).toMatchObject({ type: 'message', role: 'assistant', status: 'completed' });
    expect(item.id).toBe('msg_' + b.id.slice(5));
    expect(item.content).toHaveLength(1);
    expect(item.content[0]).toMatchObject({ type: 'output_text', annotations: [] });
    // system "Be brief." (3 + 4) + user "Tell me about ports." (5 + 4) + generation prompt 2
    expect(b.usage).toEqual({
      input_tokens: 18,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 7,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 25,
    });
    // vLLM's default max_tokens: what is left of the context
    expect(b.max_output_tokens).toBe(1000 - 18);
  });

  it('says what Chat Completions says for the same conversation (same prompt, same model)', async () => {
    const s = await sim({ outputTokens: 12 });
    const resp = await client(s.url).responses.create({
      model: 'test/model',
      instructions: 'You are terse.',
      input: [
        { role: 'user', content: 'First question' },
        { role: 'assistant', content: 'First answer' },
        { role: 'user', content: [{ type: 'input_text', text: 'Second question' }] },
      ],
    });
    const chat = await client(s.url).chat.completions.create({
      model: 'test/model',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'First question' },
        { role: 'assistant', content: 'First answer' },
        { role: 'user', content: 'Second question' },
      ],
    });
    expect(resp.output_text).toBe(chat.choices[0]!.message.content);
    expect(resp.usage!.input_tokens).toBe(chat.usage!.prompt_tokens);
  });

  it('max_output_tokens cuts the answer: status incomplete, reason max_output_tokens', async () => {
    const s = await sim({ outputTokens: 20 });
    const r = await client(s.url).responses.create({
      model: 'test/model',
      input: 'hi',
      max_output_tokens: 5,
    });
    expect(r.status).toBe('incomplete');
    expect(r.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(r.usage!.output_tokens).toBe(5);
    expect(r.max_output_tokens).toBe(5);
    expect(r.output[0]).toMatchObject({ type: 'message', status: 'incomplete' });
  });
});

describe('streaming responses', () => {
  it('sends vLLM’s typed events in order, numbered, with no [DONE]', async () => {
    const s = await sim({ outputTokens: 4 });
    const r = await request(s.url, '/v1/responses', {
      body: { model: 'test/model', input: 'hi', stream: true },
    });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(r.body).not.toContain('[DONE]');
    const events = sseEvents(r.body);
    expect(events.map((e) => e.event)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    events.forEach((e, i) => {
      expect(e.data.type).toBe(e.event);
      expect(e.data.sequence_number).toBe(i);
    });
    const created = events[0]!.data.response as Record<string, unknown>;
    expect(created).toMatchObject({ status: 'in_progress', output: [], usage: null });
    const completed = events.at(-1)!.data.response as {
      id: string;
      output: { id: string }[];
      usage: unknown;
    };
    expect(completed.id).toBe(created.id);
    const itemId = (events[2]!.data.item as { id: string }).id;
    expect(completed.output[0]!.id).toBe(itemId);
    const deltas = events.filter((e) => e.event === 'response.output_text.delta');
    for (const d of deltas)
      expect(d.data).toMatchObject({ item_id: itemId, output_index: 0, content_index: 0 });
    const text = deltas.map((d) => d.data.delta).join('');
    expect(events[8]!.data.text).toBe(text);
    expect(completed).toMatchObject({ status: 'completed', output: [{ content: [{ text }] }] });
    expect(completed.usage).toMatchObject({ input_tokens: 7, output_tokens: 4, total_tokens: 11 });
  });

  it('streams the same text as the non-streaming answer, through the SDK’s accumulator', async () => {
    const s = await sim({ outputTokens: 15 });
    const c = client(s.url);
    const whole = await c.responses.create({ model: 'test/model', input: 'Say something.' });
    const stream = c.responses.stream({ model: 'test/model', input: 'Say something.' });
    const types: string[] = [];
    for await (const e of stream) types.push(e.type);
    const final = await stream.finalResponse();
    expect(final.output_text).toBe(whole.output_text);
    expect(final.status).toBe('completed');
    expect(final.usage).toMatchObject({ input_tokens: 9, output_tokens: 15 });
    expect(types.filter((t) => t === 'response.output_text.delta')).toHaveLength(15);
  });

  it('ends a stream cut by max_output_tokens with response.incomplete', async () => {
    const s = await sim({ outputTokens: 20 });
    const r = await request(s.url, '/v1/responses', {
      body: { model: 'test/model', input: 'hi', stream: true, max_output_tokens: 3 },
    });
    const events = sseEvents(r.body);
    expect(events.filter((e) => e.event === 'response.output_text.delta')).toHaveLength(3);
    expect(events.at(-1)!.event).toBe('response.incomplete');
    expect(events.at(-1)!.data.response).toMatchObject({
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
    });
    const final = await client(s.url)
      .responses.stream({ model: 'test/model', input: 'hi', max_output_tokens: 3 })
      .finalResponse();
    expect(final.status).toBe('incomplete');
  });

  it('turns an error after the first byte into an error event the SDK raises', async () => {
    const s = await sim({ outputTokens: 10 });
    const raw = await request(s.url, '/v1/responses', {
      body: { model: 'test/model', input: 'hi', stream: true },
      headers: { 'x-sim-error-after': '2', 'x-sim-fail': '503' },
    });
    const events = sseEvents(raw.body);
    expect(events.at(-1)).toEqual({
      event: 'error',
      data: {
        code: 'ServiceUnavailableError',
        message: 'Service Unavailable',
        param: null,
        sequence_number: events.length - 1,
        type: 'error',
      },
    });
    const stream = await client(s.url).responses.create(
      { model: 'test/model', input: 'hi', stream: true },
      { headers: { 'x-sim-error-after': '2' } },
    );
    const err = await (async () => {
      for await (const _ of stream);
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(String(err)).toContain('Internal server error');
    expect(
      sample(await scrape(s.url), 'vllm:request_success_total', { ...labels, finished_reason: 'stop' }),
    ).toBe(0);
  });

  it('counts a stream the client leaves as aborted, with the tokens it was sent', async () => {
    const s = await sim({ outputTokens: 50 });
    const st = await openStream(
      s.url,
      '/v1/responses',
      { model: 'test/model', input: 'hi', stream: true },
      { 'x-sim-stall-after': '3' },
    );
    const deltas = () => st.text().split('event: response.output_text.delta\n').length - 1;
    await until(st, () => deltas() >= 3);
    st.abort();
    await new Promise((r) => setTimeout(r, 100));
    const e = await scrape(s.url);
    expect(sample(e, 'vllm:num_requests_running', labels)).toBe(0);
    expect(sample(e, 'vllm:generation_tokens_total', labels)).toBe(3);
    expect(deltas()).toBe(3);
  });
});

describe('errors', () => {
  it('refuses an unknown model, a missing input, a previous_response_id and background mode as vLLM does', async () => {
    const s = await sim();
    const c = client(s.url);
    const notFound = await c.responses.create({ model: 'nope', input: 'hi' }).catch((e: unknown) => e);
    expect(notFound).toBeInstanceOf(OpenAI.NotFoundError);

    const missing = await request(s.url, '/v1/responses', { body: { model: 'test/model' } });
    expect(missing.status).toBe(400);
    expect(JSON.parse(missing.body).error.message).toContain(
      "'loc': ('body', 'input'), 'msg': 'Field required'",
    );

    const previous = await request(s.url, '/v1/responses', {
      body: { model: 'test/model', input: 'hi', previous_response_id: 'resp_123' },
    });
    expect(previous.status).toBe(404);
    expect(JSON.parse(previous.body).error).toEqual({
      message: "Response with id 'resp_123' not found.",
      type: 'invalid_request_error',
      param: null,
      code: 404,
    });

    const background = await request(s.url, '/v1/responses', {
      body: { model: 'test/model', input: 'hi', background: true },
    });
    expect(background.status).toBe(400);
    expect(JSON.parse(background.body).error.message).toMatch(
      /^This vLLM engine does not support `store=True`/,
    );

    const longInput = await request(s.url, '/v1/responses', {
      body: { model: 'test/model', input: 'x '.repeat(5000) },
    });
    expect(longInput.status).toBe(400);
    expect(JSON.parse(longInput.body).error.message).toMatch(/maximum context length is 4096 tokens/);
    // nothing reached the engine
    expect(sample(await scrape(s.url), 'vllm:prompt_tokens_total', labels)).toBe(0);
  });
});
