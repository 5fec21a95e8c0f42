// The usage tap: what the client did not ask for is removed byte for byte, and the latest usage is
// kept so a stream cut short is metered for what was generated.
import { describe, expect, it } from 'vitest';
import { SseUsageTap, usageOfAnswer } from '../src/dedicated/proxy/sse.ts';

const head = '{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[';
const chunk = (tok: string, n: number, usage: boolean) =>
  `data: ${head}{"index":0,"delta":{"content":"${tok}"},"logprobs":null,"finish_reason":null}]` +
  (usage ? `,"usage":{"prompt_tokens":5,"total_tokens":${5 + n},"completion_tokens":${n}}` : '') +
  '}\n\n';
const final = `data: ${head}],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3}}\n\n`;

function run(tap: SseUsageTap, input: string, pieces: number): string {
  const buf = Buffer.from(input);
  const step = Math.ceil(buf.length / pieces);
  let out = '';
  for (let i = 0; i < buf.length; i += step) out += tap.push(buf.subarray(i, i + step)).toString();
  return out + tap.end().toString();
}

describe('SseUsageTap', () => {
  const withUsage = chunk('a', 1, true) + chunk('\\"usage\\":{', 2, true) + chunk('c', 3, true) + final;
  const plain = chunk('a', 1, false) + chunk('\\"usage\\":{', 2, false) + chunk('c', 3, false);

  for (const pieces of [1, 3, 17, 1000])
    it(`gives a client that asked for nothing the bytes the engine would have sent (${pieces} pieces)`, () => {
      const tap = new SseUsageTap({ stripFinal: true, stripContinuous: true });
      expect(run(tap, withUsage + 'data: [DONE]\n\n', pieces)).toBe(plain + 'data: [DONE]\n\n');
      expect(tap.usage).toEqual({ promptTokens: 5, completionTokens: 3 });
    });

  it('keeps the final usage chunk for a client that asked include_usage only', () => {
    const tap = new SseUsageTap({ stripFinal: false, stripContinuous: true });
    expect(run(tap, withUsage, 5)).toBe(plain + final);
  });

  it('passes everything through for a client that asked continuous usage', () => {
    const tap = new SseUsageTap({ stripFinal: false, stripContinuous: false });
    expect(run(tap, withUsage, 4)).toBe(withUsage);
  });

  it('a stream cut before its end reports the usage of the last chunk seen', () => {
    const tap = new SseUsageTap({ stripFinal: true, stripContinuous: true });
    run(tap, chunk('a', 1, true) + chunk('b', 2, true) + chunk('c', 3, true).slice(0, 40), 2);
    expect(tap.usage).toEqual({ promptTokens: 5, completionTokens: 2 });
  });

  it('reads the Responses API usage, and counts text deltas of a cut Responses stream', () => {
    const delta = (t: string, s: number) =>
      `event: response.output_text.delta\ndata: {"content_index":0,"delta":"${t}","sequence_number":${s},"type":"response.output_text.delta"}\n\n`;
    const cut = new SseUsageTap();
    const bytes = delta('a', 1) + delta('b', 2);
    expect(run(cut, bytes, 3)).toBe(bytes);
    expect(cut.usage).toEqual({ promptTokens: 0, completionTokens: 2 });
    const done = new SseUsageTap();
    run(
      done,
      bytes +
        'event: response.completed\ndata: {"response":{"id":"r","usage":{"input_tokens":7,"input_tokens_details":{"cached_tokens":0},"output_tokens":2,"total_tokens":9},"user":null},"type":"response.completed"}\n\n',
      2,
    );
    expect(done.usage).toEqual({ promptTokens: 7, completionTokens: 2 });
  });
});

describe('usageOfAnswer(): usage read off a whole JSON answer', () => {
  const u = (s: string) => usageOfAnswer(Buffer.from(s));
  it('reads Chat Completions usage, and Responses usage (input/output tokens)', () => {
    expect(
      u(
        '{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":7,"total_tokens":9,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}}',
      ),
    ).toEqual({ promptTokens: 7, completionTokens: 2 });
    expect(u('{"object":"response","usage":{"input_tokens":4,"output_tokens":3,"total_tokens":7}}')).toEqual({
      promptTokens: 4,
      completionTokens: 3,
    });
  });
  it('is not misled by "usage": in the text (escaped quotes) or by braces in strings', () => {
    const text = JSON.stringify('say "usage":{"prompt_tokens":999} and } {');
    expect(
      u(
        `{"choices":[{"message":{"content":${text}}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"note":"}{"}}`,
      ),
    ).toEqual({ promptTokens: 3, completionTokens: 1 });
  });
  it('falls back to the whole answer: spaced JSON, two usage members, a nested Responses event', () => {
    expect(u('{ "usage" : { "prompt_tokens": 5, "completion_tokens": 6 } }')).toEqual({
      promptTokens: 5,
      completionTokens: 6,
    });
    expect(
      u('{"a":{"usage":{"prompt_tokens":1}},"usage":{"prompt_tokens":2,"completion_tokens":3}}'),
    ).toEqual({
      promptTokens: 2,
      completionTokens: 3,
    });
    expect(
      u('{"type":"response.completed","response":{"usage":{"input_tokens":8,"output_tokens":1}}}'),
    ).toEqual({
      promptTokens: 8,
      completionTokens: 1,
    });
  });
  it('is undefined without usage, with a null one, or for what is not JSON', () => {
    expect(u('{"choices":[]}')).toBeUndefined();
    expect(u('{"usage":null}')).toBeUndefined();
    expect(u('not json')).toBeUndefined();
    expect(u('{"usage":{"prompt_tokens":1')).toBeUndefined();
  });
});
