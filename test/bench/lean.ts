// What the shipped benchmarks (proxy-shipped.ts, elastic.ts) measure Berth against, in the same run:
// - the lean proxy: ../shared/bench/bare-proxy.mjs (node:http in, an undici Pool out, headers passed
//   through, bodies piped), the least a Node proxy can do. It resolves `undici` from its own folder,
//   so it runs as a copy under node_modules/.cache (BENCH_LEAN_PROXY names another file);
// - a stamping SSE upstream in this process: every event carries the moment it was written ("t", µs
//   on this process's clock), so the delay from an upstream chunk to the client is read off each
//   event the client receives, through any proxy, without another clock.
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { request, type Agent } from 'undici';
import { stop } from './proxy.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** Where the lean proxy is kept: shared/ beside the repository (BENCH_LEAN_PROXY overrides). */
export const LEAN_PROXY =
  process.env.BENCH_LEAN_PROXY ?? path.resolve(root, '../shared/bench/bare-proxy.mjs');

export interface Lean {
  child: ChildProcess;
  /** The proxy's origin: a request to `<url><path>` goes to `<upstream origin><path>`. */
  url: string;
  stop(): Promise<void>;
}

/** The lean proxy in its own process, forwarding to `upstream` (an origin). */
export async function startLean(upstream: string, port: number): Promise<Lean> {
  if (!existsSync(LEAN_PROXY))
    throw new Error(`the lean baseline proxy ${LEAN_PROXY} is missing (BENCH_LEAN_PROXY names it)`);
  const dir = path.join(root, 'node_modules/.cache/berth-bench');
  mkdirSync(dir, { recursive: true });
  const script = path.join(dir, 'bare-proxy.mjs');
  copyFileSync(LEAN_PROXY, script);
  const nodeArgs = process.env.BENCH_LEAN_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const child = spawn(process.execPath, [...nodeArgs, script], {
    cwd: root,
    env: { ...process.env, UPSTREAM: new URL(upstream).origin, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('lean proxy: not ready in 30 s')), 30_000);
    child.stdout!.once('data', () => (clearTimeout(timer), resolve()));
    child.once('exit', (code) => (clearTimeout(timer), reject(new Error(`lean proxy exited ${code}`))));
  });
  child.stdout!.resume();
  return { child, url: `http://127.0.0.1:${port}`, stop: () => stop(child) };
}

/** µs on this process's clock (the stamper's and the client's). */
export const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);

export interface Stamper {
  /** OpenAI base URL (`…/v1`). */
  url: string;
  close(): Promise<void>;
}

/**
 * A vLLM-shaped chat completions server: `max_tokens` chunks, one every `intervalMs` (0: all in one
 * write), each `data:` event stamped with `"t"` at the moment it is written; with `stream_options`'s
 * `include_usage` a final usage chunk, with `continuous_usage_stats` a usage member on every chunk
 * (appended last, as vLLM does).
 */
export async function startStamper(intervalMs: number): Promise<Stamper> {
  const server = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(parts).toString('utf8') || '{}') as {
        model?: string;
        max_tokens?: number;
        stream?: boolean;
        stream_options?: { include_usage?: boolean; continuous_usage_stats?: boolean };
      };
      const n = body.max_tokens ?? 16;
      const model = body.model ?? 'stamp';
      const prompt = 8;
      if (!body.stream) {
        const json = JSON.stringify({
          id: 'cmpl-stamp',
          object: 'chat.completion',
          created: 1,
          model,
          choices: [
            { index: 0, message: { role: 'assistant', content: 'x'.repeat(n) }, finish_reason: 'length' },
          ],
          usage: { prompt_tokens: prompt, completion_tokens: n, total_tokens: prompt + n },
        });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) });
        return res.end(json);
      }
      const continuous = body.stream_options?.continuous_usage_stats === true;
      const final = body.stream_options?.include_usage === true;
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
      const usage = (k: number) =>
        `"usage":{"prompt_tokens":${prompt},"completion_tokens":${k},"total_tokens":${prompt + k}}`;
      const event = (k: number) =>
        `data: {"id":"cmpl-stamp","object":"chat.completion.chunk","created":1,"model":"${model}","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":${k === n ? '"length"' : 'null'}}],"t":${nowUs()}${continuous ? ',' + usage(k) : ''}}\n\n`;
      const end = () =>
        res.end(
          (final
            ? `data: {"id":"cmpl-stamp","object":"chat.completion.chunk","created":1,"model":"${model}","choices":[],${usage(n)}}\n\n`
            : '') + 'data: [DONE]\n\n',
        );
      if (intervalMs === 0) {
        let out = '';
        for (let k = 1; k <= n; k++) out += event(k);
        res.write(out);
        return end();
      }
      let k = 0;
      const timer = setInterval(() => {
        if (res.destroyed) return clearInterval(timer);
        res.write(event(++k));
        if (k === n) {
          clearInterval(timer);
          end();
        }
      }, intervalMs);
      res.on('close', () => clearInterval(timer));
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

const STAMP = /"t":(\d+)/g;

/**
 * One streamed call; for each stamped event, the µs from its stamp to its arrival here. Throws
 * unless the answer is a 200 ending in `data: [DONE]`.
 */
export async function stampedStream(
  url: string,
  headers: Record<string, string>,
  model: string,
  chunks: number,
  agent: Agent,
): Promise<number[]> {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({
      model,
      messages: [{ role: 'user', content: 'stamp' }],
      max_tokens: chunks,
      stream: true,
    }),
    dispatcher: agent,
  });
  const delays: number[] = [];
  let pending = '';
  let last = '';
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    const at = nowUs();
    pending += chunk.toString('utf8');
    // An event counts when its end arrives (a chunk may end inside one).
    const cut = pending.lastIndexOf('\n\n');
    if (cut === -1) continue;
    const complete = pending.slice(0, cut + 2);
    pending = pending.slice(cut + 2);
    for (const m of complete.matchAll(STAMP)) delays.push(at - Number(m[1]));
    last = complete.slice(-64);
  }
  if (res.statusCode !== 200 || !last.endsWith('data: [DONE]\n\n'))
    throw new Error(`stamped stream via ${url}: ${res.statusCode} ${last}`);
  return delays;
}
