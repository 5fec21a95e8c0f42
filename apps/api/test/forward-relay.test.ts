// forward()'s streaming relay: every event reaches a client that reads slowly (backpressure pauses
// the engine's body and resumes it on drain), and an abort mid-stream — while flowing or while
// paused on a full client socket — ends the answer with an error frame instead of hanging.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEngineSim } from '@berth/engine-sim';
import { ApiError } from '../src/platform/errors.ts';
import { forward } from '../src/dedicated/proxy/forward.ts';

const dispatcher = new Agent({ connections: null });
let sim: Awaited<ReturnType<typeof startEngineSim>>;

beforeAll(async () => {
  sim = await startEngineSim({
    model: 'org/m',
    ttftMs: 0,
    itlMs: 0,
    outputTokens: 8,
    maxModelLen: 1_000_000,
  });
});
afterAll(async () => {
  await sim?.close();
  await dispatcher.close();
});

/** A one-route app forwarding to the simulator; `abortAfterMs` aborts the call like the wall-clock limit. */
async function proxy(abortAfterMs?: number) {
  const outcome: { settled: boolean; completionTokens?: number } = { settled: false };
  const app = express();
  app.use(express.json());
  app.post('/v1/chat/completions', async (req, res) => {
    const controller = new AbortController();
    if (abortAfterMs !== undefined)
      setTimeout(() => controller.abort(new ApiError('gateway_timeout')), abortAfterMs);
    const usage = await forward(
      {
        upstream: { next: () => sim.url },
        method: 'POST',
        path: '/v1/chat/completions',
        body: req.body,
        requestId: 'r',
        signal: controller.signal,
      },
      res,
      { dispatcher, retries: 0 },
    );
    outcome.settled = true;
    outcome.completionTokens = usage?.completionTokens;
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const { port } = server.address() as AddressInfo;
  return { port, outcome, close: () => new Promise((r) => server.close(r)) };
}

/** Streams `tokens` tokens, reading nothing for `stallMs` first (the socket buffers fill up). */
function slowClient(port: number, tokens: number, stallMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path: '/v1/chat/completions',
        method: 'POST',
        headers: { 'content-type': 'application/json' },
      },
      (res) => {
        res.pause();
        const chunks: Buffer[] = [];
        setTimeout(() => {
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
          res.resume();
        }, stallMs);
      },
    );
    req.on('error', reject);
    req.end(
      JSON.stringify({
        model: 'org/m',
        messages: [{ role: 'user', content: 'hello' }],
        max_tokens: tokens,
        ignore_eos: true,
        stream: true,
      }),
    );
  });
}

const dataEvents = (text: string) => text.split('\n\n').filter((e) => e.startsWith('data: {'));

describe('forward() streaming relay', () => {
  it('a client that stalls still gets every event, in order, and the usage is read', async () => {
    const p = await proxy();
    const text = await slowClient(p.port, 20_000, 300);
    const events = dataEvents(text);
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(text).not.toContain('"usage":{');
    expect(events.length).toBeGreaterThanOrEqual(20_000);
    expect(p.outcome).toEqual({ settled: true, completionTokens: 20_000 });
    await p.close();
  });

  it('an abort while the client socket is full ends the answer with an error frame', async () => {
    const p = await proxy(100);
    const text = await slowClient(p.port, 200_000, 600);
    expect(p.outcome.settled).toBe(true);
    const events = text.split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(JSON.parse(events.at(-2)!.slice(6))).toMatchObject({ error: { code: 'gateway_timeout' } });
    expect(dataEvents(text).length).toBeLessThan(200_000);
    await p.close();
  });
});
