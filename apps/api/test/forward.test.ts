// forward(): retries only before the first byte, error frames after it, upstream errors in our
// shape, usage read from the stream. Against real engine simulators; a mid-stream connection reset
// needs a raw upstream that can cut a response half-way, which the simulator does not do.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEngineSim } from '@berth/engine-sim';
import { ApiError, errorBody } from '../src/platform/errors.ts';
import { forward } from '../src/dedicated/proxy/forward.ts';
import type { Usage } from '../src/dedicated/proxy/sse.ts';

const dispatcher = new Agent({ connections: null });
let sim: Awaited<ReturnType<typeof startEngineSim>>;
let resetting: Server;
let resettingUrl: string;
let deadUrl: string;

function listen(server: Server): Promise<string> {
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`),
    ),
  );
}

beforeAll(async () => {
  sim = await startEngineSim({ model: 'org/m', ttftMs: 0, itlMs: 1, outputTokens: 8 });
  // Sends two SSE events, then destroys the connection.
  resetting = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: {"id":"x","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n');
    res.write('data: {"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n');
    setTimeout(() => res.socket?.destroy(), 20);
  });
  resettingUrl = await listen(resetting);
  // A port nobody listens on: connection refused.
  const closed = createServer();
  deadUrl = await listen(closed);
  await new Promise((r) => closed.close(r));
});
afterAll(async () => {
  await sim?.close();
  resetting?.close();
  await dispatcher.close();
});

/** A one-route app that forwards to `address` and records what forward() returned or threw. */
async function proxyTo(address: () => string, retries = 2) {
  const outcome: { usage?: Usage; error?: unknown; attempts: number } = { attempts: 0 };
  const app = express();
  app.use(express.json());
  app.post('/v1/chat/completions', async (req, res) => {
    const counted = () => {
      outcome.attempts++;
      return address();
    };
    try {
      outcome.usage = await forward(
        {
          upstream: { next: counted },
          method: 'POST',
          path: '/v1/chat/completions',
          body: req.body,
          requestId: 'r',
          signal: new AbortController().signal,
        },
        res,
        { dispatcher, retries, retryDelayMs: 5 },
      );
    } catch (err) {
      outcome.error = err;
      const e = err instanceof ApiError ? err : new ApiError('internal_error');
      res.status(e.status).json(errorBody(e, 'openai'));
    }
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, outcome, close: () => new Promise((r) => server.close(r)) };
}

const chat = (url: string, body: Record<string, unknown> = {}) =>
  fetch(url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'org/m', messages: [{ role: 'user', content: 'hello' }], ...body }),
  });

describe('forward()', () => {
  it('retries a refused connection on the next replica, before the first byte', async () => {
    let n = 0;
    const p = await proxyTo(() => (n++ === 0 ? deadUrl : sim.url));
    const res = await chat(p.url);
    expect(res.status).toBe(200);
    expect((await res.json()).choices[0].message.content.length).toBeGreaterThan(0);
    expect(p.outcome.attempts).toBe(2);
    expect(p.outcome.usage).toEqual({ promptTokens: expect.any(Number), completionTokens: 8 });
    await p.close();
  });

  it('gives up after the retries: 500 Failed to communicate with inference engine', async () => {
    const p = await proxyTo(() => deadUrl, 2);
    const res = await chat(p.url);
    expect(res.status).toBe(500);
    expect((await res.json()).error).toMatchObject({
      message: 'Failed to communicate with inference engine',
      code: 'engine_unreachable',
    });
    expect(p.outcome.attempts).toBe(3);
    await p.close();
  });

  it('a failure after the first byte becomes an SSE error frame, with no retry', async () => {
    const p = await proxyTo(() => resettingUrl);
    const res = await chat(p.url, { stream: true });
    expect(res.status).toBe(200);
    const text = await res.text();
    const events = text.split('\n\n').filter(Boolean);
    expect(events.slice(0, 2).every((e) => e.startsWith('data: {"id":"x"'))).toBe(true);
    expect(JSON.parse(events[2]!.slice(6))).toMatchObject({
      error: { message: 'Failed to communicate with inference engine' },
    });
    expect(events[3]).toBe('data: [DONE]');
    expect(p.outcome.attempts).toBe(1);
    await p.close();
  });

  it("streams the engine's SSE, reads the usage it was asked for, and hides that chunk from a client that did not ask", async () => {
    const p = await proxyTo(() => sim.url);
    const text = await (await chat(p.url, { stream: true })).text();
    expect(text).not.toContain('"usage":{');
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(p.outcome.usage).toEqual({ promptTokens: expect.any(Number), completionTokens: 8 });

    const asked = await (await chat(p.url, { stream: true, stream_options: { include_usage: true } })).text();
    expect(asked).toContain('"usage":{');
    await p.close();
  });

  it("keeps an engine error's status, message and param, in the dual shape", async () => {
    const p = await proxyTo(() => sim.url);
    const res = await chat(p.url, { model: 'other' });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({
      error: {
        message: 'The model `other` does not exist.',
        type: 'invalid_request_error',
        code: 'engine_error',
        param: 'model',
      },
      message: 'The model `other` does not exist.',
    });
    expect(p.outcome.attempts).toBe(1);
    await p.close();
  });
});
