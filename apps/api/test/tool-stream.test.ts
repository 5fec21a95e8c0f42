// The managed loop's stream, read by the official openai SDK over HTTP: content, tool events,
// the finish reason, and the end at [DONE].
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { chatStreamFrames } from '../src/tools/stream.ts';

async function serve(body: string) {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => server.close(r)) };
}

describe('managed loop as a chat stream', () => {
  it('the SDK yields the tool events, the text and the finish reason, and stops at [DONE]', async () => {
    const f = chatStreamFrames({ id: 'chatcmpl-1', model: 'sim', created: 1 });
    const call = { call_id: 'c1', server_label: 'toolbox', name: 'add', arguments: '{"a": 2, "b": 3}' };
    const body =
      f.event({ type: 'tool_call', ...call }) +
      f.event({ type: 'tool_result', ...call, output: '5', is_error: false }) +
      f.event({ type: 'content', delta: 'Tool results: ' }) +
      f.event({ type: 'content', delta: 'add: 5' }) +
      f.end(
        {
          message: { role: 'assistant', content: 'Tool results: add: 5' },
          finish_reason: 'stop',
          model: 'sim',
        },
        { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
      );
    expect(body.endsWith('data: [DONE]\n\n')).toBe(true);
    const server = await serve(body);
    try {
      const client = new OpenAI({ baseURL: server.url, apiKey: 'svc_live_x', maxRetries: 0 });
      const stream = await client.chat.completions.create({
        model: 'sim',
        messages: [{ role: 'user', content: 'x' }],
        stream: true,
      });
      const tools: unknown[] = [];
      let text = '';
      let finish: string | null = null;
      let usage: unknown;
      for await (const chunk of stream) {
        const tool = (chunk as unknown as { berth_tool?: unknown }).berth_tool;
        if (tool) tools.push(tool);
        text += chunk.choices[0]?.delta.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
        usage = chunk.usage ?? usage;
      }
      expect(tools).toEqual([
        { type: 'tool_call', ...call },
        { type: 'tool_result', ...call, output: '5', is_error: false },
      ]);
      expect(text).toBe('Tool results: add: 5');
      expect(finish).toBe('stop');
      expect(usage).toEqual({ prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 });
    } finally {
      await server.close();
    }
  });

  it('a client function call passes through in the finish chunk', async () => {
    const f = chatStreamFrames({ id: 'chatcmpl-2', model: 'sim', created: 1 });
    const call = { id: 'call_1', type: 'function' as const, function: { name: 'lookup', arguments: '{}' } };
    const body = f.end({
      message: { role: 'assistant', content: null, tool_calls: [call] },
      finish_reason: 'tool_calls',
      model: 'sim',
    });
    const server = await serve(body);
    try {
      const client = new OpenAI({ baseURL: server.url, apiKey: 'svc_live_x', maxRetries: 0 });
      const stream = await client.chat.completions.create({
        model: 'sim',
        messages: [{ role: 'user', content: 'x' }],
        stream: true,
      });
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      expect(chunks).toHaveLength(1);
      expect(chunks[0]!.choices[0]).toMatchObject({
        delta: { role: 'assistant', tool_calls: [{ index: 0, ...call }] },
        finish_reason: 'tool_calls',
      });
    } finally {
      await server.close();
    }
  });
});
