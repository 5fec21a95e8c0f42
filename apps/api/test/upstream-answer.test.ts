// dispatchCall(): one upstream call through undici's dispatch() and Berth's own handler, against a
// real HTTP server: the body read whole, capped, streamed with backpressure, dropped; failures
// before and after the headers; an abort before the call connects, mid-body, and by destroying
// the stream (the server sees its request go away).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dispatchCall } from '../src/dedicated/proxy/upstream-answer.ts';

const dispatcher = new Agent({ connections: null });
let server: Server;
let origin: string;
/** Resolved when the server sees a request's connection close before its answer ended. */
let closedEarly: Promise<void> = Promise.resolve();
let onClosedEarly = () => {};

const routes: Record<string, (req: IncomingMessage, res: ServerResponse) => void> = {
  '/json': (_req, res) => {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end('{"ok":true}');
  },
  '/chunks': (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    let i = 0;
    const t = setInterval(() => {
      if (i === 5) return (clearInterval(t), res.end());
      res.write(`part${i++};`);
    }, 5);
  },
  '/big': (_req, res) => {
    res.writeHead(500, { 'content-type': 'text/plain' });
    res.end('x'.repeat(200_000));
  },
  '/cut': (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
    res.write('{"partial":');
    setTimeout(() => res.socket?.destroy(), 10);
  },
  '/endless': (req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const event = `data: ${JSON.stringify({ pad: 'x'.repeat(4000) })}\n\n`;
    const t = setInterval(() => res.write(event), 1);
    res.on('close', () => {
      clearInterval(t);
      if (!res.writableFinished) onClosedEarly();
    });
    req.resume();
  },
};

beforeAll(async () => {
  server = createServer((req, res) => routes[req.url!]!(req, res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await dispatcher.destroy();
  await new Promise((r) => server.close(r));
});

const call = (path: string, signal?: AbortSignal) =>
  dispatchCall(dispatcher, { origin, path, method: 'GET', headersTimeout: 0, bodyTimeout: 0 }, signal);

function expectServerToSeeClose(): Promise<void> {
  closedEarly = new Promise<void>((r) => (onClosedEarly = r));
  return closedEarly;
}

describe('dispatchCall()', () => {
  it('gives the status and content type, and the body read whole', async () => {
    const a = await call('/json');
    expect(a.statusCode).toBe(200);
    expect(a.contentType).toBe('application/json');
    expect((await a.read()).toString()).toBe('{"ok":true}');
  });

  it('keeps chunks that arrive before the body is taken, and joins them', async () => {
    const a = await call('/chunks');
    await new Promise((r) => setTimeout(r, 15)); // some parts arrive before read()
    expect((await a.read()).toString()).toBe('part0;part1;part2;part3;part4;');
  });

  it('caps what it keeps of a body and still reads it to the end (the connection is reused)', async () => {
    const a = await call('/big');
    expect(a.statusCode).toBe(500);
    const kept = await a.read(64 * 1024);
    expect(kept.length).toBe(64 * 1024);
    const b = await call('/json');
    expect((await b.read()).toString()).toBe('{"ok":true}');
  });

  it('dump() never fails: a body cut mid-way, or past 128 KiB (then the connection goes)', async () => {
    const cut = await call('/cut');
    await expect(cut.dump()).resolves.toBeUndefined();
    const big = await call('/big');
    await expect(big.dump()).resolves.toBeUndefined();
    const next = await call('/json');
    expect((await next.read()).toString()).toBe('{"ok":true}');
  });

  it('drops a body with dump()', async () => {
    const a = await call('/chunks');
    await expect(a.dump()).resolves.toBeUndefined();
    expect(() => a.read()).toThrow(/already taken/);
  });

  it('streams a body, chunks kept before stream() first, and ends', async () => {
    const a = await call('/chunks');
    await new Promise((r) => setTimeout(r, 8));
    let text = '';
    for await (const chunk of a.stream()) text += String(chunk);
    expect(text).toBe('part0;part1;part2;part3;part4;');
  });

  it('rejects before the headers when nothing listens', async () => {
    const dead = createServer();
    await new Promise<void>((r) => dead.listen(0, '127.0.0.1', r));
    const port = (dead.address() as AddressInfo).port;
    await new Promise((r) => dead.close(r));
    await expect(
      dispatchCall(dispatcher, { origin: `http://127.0.0.1:${port}`, path: '/', method: 'GET' }),
    ).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  });

  it('fails read() with the error when the connection is cut mid-body, and calls whenDone', async () => {
    const a = await call('/cut');
    const done = new Promise((r) => a.whenDone(r));
    await expect(a.read()).rejects.toThrow();
    expect(await done).toBeInstanceOf(Error);
  });

  it('refuses a call whose signal aborted already, with its reason', async () => {
    const reason = new Error('gone before');
    await expect(call('/json', AbortSignal.abort(reason))).rejects.toBe(reason);
  });

  it('an abort mid-body fails the stream with the reason and the server sees the request go', async () => {
    const ac = new AbortController();
    const seen = expectServerToSeeClose();
    const a = await call('/endless', ac.signal);
    const body = a.stream();
    body.resume();
    const reason = new Error('client left');
    setTimeout(() => ac.abort(reason), 10);
    await expect(new Promise((_, reject) => body.once('error', reject))).rejects.toBe(reason);
    await seen;
  });

  it('destroying the stream aborts the call, and the server sees it', async () => {
    const seen = expectServerToSeeClose();
    const a = await call('/endless');
    const body = a.stream();
    body.once('data', () => body.destroy());
    await seen;
  });

  it('pauses the upstream while the stream is not read (backpressure), and resumes', async () => {
    const a = await call('/endless');
    const body = a.stream();
    await new Promise((r) => setTimeout(r, 100));
    // Not flowing: the stream holds its high-water mark and one socket read at most (~100 ms of
    // this server is ~400 KB); the rest waits upstream.
    expect(body.readableLength).toBeLessThan(160 * 1024);
    let n = 0;
    body.on('data', () => n++);
    await new Promise((r) => setTimeout(r, 30));
    expect(n).toBeGreaterThan(0);
    body.destroy();
  });
});
