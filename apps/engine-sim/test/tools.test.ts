// Scripted tool calls: `call <name> <args>` lines in the last user message, one call per turn,
// then an answer quoting the tool results — on Chat Completions and the Responses API, streamed
// and not, as the official SDK assembles them.
import OpenAI from 'openai';
import type { ChatCompletionMessageParam, ChatCompletionTool } from 'openai/resources/chat/completions';
import type { ResponseInputItem } from 'openai/resources/responses/responses';
import { describe, expect, it } from 'vitest';
import { chatTurns } from '../src/text.ts';
import { parseCallScript, planToolTurn, pythonJson } from '../src/tools.ts';
import { request, sample, scrape, sim, sseData } from './helpers.ts';

function client(url: string): OpenAI {
  return new OpenAI({ baseURL: url + '/v1', apiKey: 'x', maxRetries: 0 });
}

const tools: ChatCompletionTool[] = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object' } } },
];
const script = 'What should I wear?\ncall get_weather {"city":"Paris"}\ncall get_time {"tz":"CET"}';

describe('the call script', () => {
  it('reads call lines in order, arguments as vLLM re-serialises them, {} when absent, broken JSON as written', () => {
    expect(
      parseCallScript(
        'intro\ncall get_weather {"city":"Paris","days":[1,2]}\n  call ping\ncall x.y-z {oops\ncalling all',
      ),
    ).toEqual([
      { name: 'get_weather', arguments: '{"city": "Paris", "days": [1, 2]}' },
      { name: 'ping', arguments: '{}' },
      { name: 'x.y-z', arguments: '{oops' },
    ]);
    expect(pythonJson({ a: 'é', b: null, c: [true, 1.5] })).toBe('{"a": "é", "b": null, "c": [true, 1.5]}');
  });

  it('plans the next call not yet made since the last user message, then the results', () => {
    const names = ['get_weather', 'get_time'];
    const user = { role: 'user', content: script };
    const call = (id: string, name: string) => ({
      role: 'assistant',
      content: null,
      tool_calls: [{ id, type: 'function', function: { name, arguments: '{}' } }],
    });
    const result = (id: string, content: string) => ({ role: 'tool', tool_call_id: id, content });
    expect(planToolTurn(chatTurns([user]), names, 'auto')).toEqual({
      type: 'call',
      name: 'get_weather',
      arguments: '{"city": "Paris"}',
    });
    const afterOne = chatTurns([user, call('a', 'get_weather'), result('a', 'sunny')]);
    expect(planToolTurn(afterOne, names, 'auto')).toMatchObject({ type: 'call', name: 'get_time' });
    const afterTwo = chatTurns([
      ...[user, call('a', 'get_weather'), result('a', 'sunny')],
      call('b', 'get_time'),
      result('b', '9:00'),
    ]);
    expect(planToolTurn(afterTwo, names, 'auto')).toEqual({
      type: 'results',
      text: 'Tool results: get_weather: sunny; get_time: 9:00',
    });
    // a new user message starts a new script; calls before it do not count
    const next = chatTurns([
      ...[user, call('a', 'get_weather'), result('a', 'sunny')],
      { role: 'user', content: 'call get_time' },
    ]);
    expect(planToolTurn(next, names, 'auto')).toEqual({ type: 'call', name: 'get_time', arguments: '{}' });
    // no script: a normal answer; tool_choice none: never a call
    expect(planToolTurn(chatTurns([{ role: 'user', content: 'hi' }]), names, 'auto')).toEqual({
      type: 'none',
    });
    expect(planToolTurn(chatTurns([user]), names, 'none')).toEqual({ type: 'none' });
    // required without a script: the first tool; a named function: that one
    expect(planToolTurn(chatTurns([{ role: 'user', content: 'hi' }]), names, 'required')).toEqual({
      type: 'call',
      name: 'get_weather',
      arguments: '{}',
    });
    expect(planToolTurn(chatTurns([user]), names, { name: 'get_time' })).toEqual({
      type: 'call',
      name: 'get_time',
      arguments: '{}',
    });
  });
});

describe('Chat Completions with tools', () => {
  it('runs a two-call loop to an answer that quotes the results, with usage that adds up', async () => {
    const s = await sim({ outputTokens: 8 });
    const c = client(s.url);
    const messages: ChatCompletionMessageParam[] = [{ role: 'user', content: script }];
    const seen: string[] = [];
    let completionTokens = 0;
    for (let turn = 0; turn < 5; turn++) {
      const r = await c.chat.completions.create({ model: 'test/model', messages, tools });
      completionTokens += r.usage!.completion_tokens;
      const m = r.choices[0]!.message;
      messages.push(m);
      if (r.choices[0]!.finish_reason !== 'tool_calls') {
        expect(m.content).toBe('Tool results: get_weather: 18C and rain; get_time: 09:30');
        expect(m.tool_calls).toEqual([]);
        break;
      }
      expect(m.content).toBeNull();
      expect(m.tool_calls).toHaveLength(1);
      const tc = m.tool_calls![0]!;
      if (tc.type !== 'function') throw new Error('expected a function call');
      expect(tc.id).toMatch(/^chatcmpl-tool-[0-9a-f]{32}$/);
      seen.push(`${tc.function.name} ${tc.function.arguments}`);
      const out = tc.function.name === 'get_weather' ? '18C and rain' : '09:30';
      messages.push({ role: 'tool', tool_call_id: tc.id, content: out });
    }
    expect(seen).toEqual(['get_weather {"city": "Paris"}', 'get_time {"tz": "CET"}']);
    expect(messages).toHaveLength(6);
    // the simulator counted exactly the tokens the three answers reported
    expect(sample(await scrape(s.url), 'vllm:generation_tokens_total', { model_name: 'test/model' })).toBe(
      completionTokens,
    );
  });

  it('streams a call as vLLM does: id and name first, then argument deltas, then finish_reason tool_calls', async () => {
    const s = await sim();
    const r = await request(s.url, '/v1/chat/completions', {
      body: { model: 'test/model', messages: [{ role: 'user', content: script }], tools, stream: true },
    });
    const chunks = sseData(r.body)
      .slice(0, -1)
      .map((e) => JSON.parse(e));
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    const first = chunks[1].choices[0].delta.tool_calls[0];
    expect(first).toEqual({
      id: expect.stringMatching(/^chatcmpl-tool-/),
      type: 'function',
      index: 0,
      function: { name: 'get_weather' },
    });
    const argDeltas = chunks.slice(2, -1).map((ch) => {
      expect(ch.choices[0].delta.tool_calls[0]).toMatchObject({ index: 0 });
      expect(ch.choices[0].delta.tool_calls[0].id).toBeUndefined();
      return ch.choices[0].delta.tool_calls[0].function.arguments as string;
    });
    expect(argDeltas.join('')).toBe('{"city": "Paris"}');
    expect(argDeltas.length).toBeGreaterThan(1);
    expect(chunks.at(-1).choices[0]).toEqual({
      index: 0,
      delta: {},
      logprobs: null,
      finish_reason: 'tool_calls',
      stop_reason: null,
    });

    const stream = client(s.url).chat.completions.stream({
      model: 'test/model',
      messages: [{ role: 'user', content: script }],
      tools,
    });
    const final = await stream.finalChatCompletion();
    expect(final.choices[0]!.finish_reason).toBe('tool_calls');
    expect(final.choices[0]!.message.tool_calls).toEqual([
      {
        id: expect.stringMatching(/^chatcmpl-tool-/),
        type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Paris"}' },
      },
    ]);
  });

  it('honours tool_choice none, a named function and required', async () => {
    const s = await sim({ outputTokens: 5 });
    const c = client(s.url);
    const messages: ChatCompletionMessageParam[] = [{ role: 'user', content: script }];
    const none = await c.chat.completions.create({
      model: 'test/model',
      messages,
      tools,
      tool_choice: 'none',
    });
    expect(none.choices[0]!.finish_reason).toBe('stop');
    expect(none.usage!.completion_tokens).toBe(5);
    const named = await c.chat.completions.create({
      model: 'test/model',
      messages,
      tools,
      tool_choice: { type: 'function', function: { name: 'get_time' } },
    });
    expect(named.choices[0]!.message.tool_calls![0]).toMatchObject({
      function: { name: 'get_time', arguments: '{}' },
    });
    const required = await c.chat.completions.create({
      model: 'test/model',
      messages: [{ role: 'user', content: 'no script here' }],
      tools,
      tool_choice: 'required',
    });
    expect(required.choices[0]!.message.tool_calls![0]).toMatchObject({ function: { name: 'get_weather' } });
    const plain = await c.chat.completions.create({
      model: 'test/model',
      messages: [{ role: 'user', content: 'no script here' }],
      tools,
    });
    expect(plain.choices[0]!.finish_reason).toBe('stop');
  });

  it('answers a call cut by max_tokens as the text written so far, finish_reason length', async () => {
    const s = await sim();
    const r = await client(s.url).chat.completions.create({
      model: 'test/model',
      messages: [{ role: 'user', content: script }],
      tools,
      max_tokens: 6,
    });
    expect(r.choices[0]!.finish_reason).toBe('length');
    expect(r.choices[0]!.message.tool_calls).toEqual([]);
    expect(r.choices[0]!.message.content).toBe('<tool_call>\n{"name');
    expect(r.usage!.completion_tokens).toBe(6);
  });

  it('refuses bad tool parameters with 400 before any work', async () => {
    const s = await sim();
    const body = (extra: Record<string, unknown>) => ({
      model: 'test/model',
      messages: [{ role: 'user', content: 'hi' }],
      ...extra,
    });
    const cases: [Record<string, unknown>, string][] = [
      [{ tools: 'x' }, 'Input should be a valid list'],
      [{ tools: [{ type: 'function', function: {} }] }, 'Field required'],
      [{ tool_choice: 'required' }, 'When using `tool_choice`, `tools` must be set.'],
      [
        { tools, tool_choice: { type: 'function', function: { name: 'nope' } } },
        'The tool specified in `tool_choice` does not match any of the specified `tools`',
      ],
      [{ tools, tool_choice: 'sometimes' }, "Input should be 'none', 'auto' or 'required'"],
    ];
    for (const [extra, message] of cases) {
      const r = await request(s.url, '/v1/chat/completions', { body: body(extra) });
      expect(r.status, JSON.stringify(extra)).toBe(400);
      expect(JSON.parse(r.body).error.message).toContain(message);
    }
    expect(sample(await scrape(s.url), 'vllm:prompt_tokens_total', { model_name: 'test/model' })).toBe(0);
  });
});

describe('Responses API with function tools', () => {
  const rtools = [
    { type: 'function' as const, name: 'get_weather', parameters: { type: 'object' }, strict: false },
    { type: 'function' as const, name: 'get_time', parameters: { type: 'object' }, strict: false },
  ];

  it('runs a two-call loop, streamed, to an answer quoting the results', async () => {
    const s = await sim({ outputTokens: 8 });
    const c = client(s.url);
    const input: ResponseInputItem[] = [{ role: 'user', content: script }];
    const calls: string[] = [];
    for (let turn = 0; turn < 5; turn++) {
      const stream = c.responses.stream({ model: 'test/model', input, tools: rtools });
      const argDeltas: string[] = [];
      stream.on('response.function_call_arguments.delta', (e) => argDeltas.push(e.delta));
      const r = await stream.finalResponse();
      expect(r.status).toBe('completed');
      const item = r.output[0]!;
      if (item.type === 'message') {
        expect(r.output_text).toBe('Tool results: get_weather: rain; get_time: noon');
        break;
      }
      if (item.type !== 'function_call') throw new Error(`unexpected ${item.type}`);
      expect(item.call_id).toMatch(/^call_[0-9a-f]{32}$/);
      expect(item.id).toMatch(/^fc_[0-9a-f]{32}$/);
      expect(argDeltas.join('')).toBe(item.arguments);
      calls.push(`${item.name} ${item.arguments}`);
      input.push(item, {
        type: 'function_call_output',
        call_id: item.call_id,
        output: item.name === 'get_weather' ? 'rain' : 'noon',
      });
    }
    expect(calls).toEqual(['get_weather {"city": "Paris"}', 'get_time {"tz": "CET"}']);
  });

  it('answers a call without streaming as one function_call item', async () => {
    const s = await sim();
    const r = await client(s.url).responses.create({ model: 'test/model', input: script, tools: rtools });
    expect(r.output).toEqual([
      {
        arguments: '{"city": "Paris"}',
        call_id: expect.stringMatching(/^call_/),
        name: 'get_weather',
        type: 'function_call',
        id: expect.stringMatching(/^fc_/),
        status: 'completed',
      },
    ]);
    expect(r.tools).toHaveLength(2);
  });
});
