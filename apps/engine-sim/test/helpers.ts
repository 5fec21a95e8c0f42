import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { afterEach } from 'vitest';
import { startEngineSim, type EngineSimHandle, type StartEngineSimOptions } from '../src/index.ts';

export const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
export const cli = fileURLToPath(new URL('../src/main.ts', import.meta.url));

const running: EngineSimHandle[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((s) => s.close(0)));
});

/** A simulator with zero latency knobs unless the test says otherwise; closed after each test. */
export async function sim(options: StartEngineSimOptions = {}): Promise<EngineSimHandle> {
  const s = await startEngineSim({ model: 'test/model', ttftMs: 0, itlMs: 0, outputTokens: 8, ...options });
  running.push(s);
  return s;
}

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A request on a fresh connection, read to the end as raw text. */
export function request(
  url: string,
  path: string,
  options: { method?: string; body?: unknown; headers?: Record<string, string>; signal?: AbortSignal } = {},
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const payload =
      options.body === undefined
        ? undefined
        : typeof options.body === 'string'
          ? options.body
          : JSON.stringify(options.body);
    const req = http.request(
      url + path,
      {
        method: options.method ?? (payload === undefined ? 'GET' : 'POST'),
        headers: { 'content-type': 'application/json', connection: 'close', ...options.headers },
        signal: options.signal,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** Opens a streaming request and hands back the response plus a live view of the bytes so far. */
export function openStream(
  url: string,
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ res: http.IncomingMessage; text: () => string; ended: Promise<void>; abort: () => void }> {
  return new Promise((resolve, reject) => {
    const ac = new AbortController();
    const req = http.request(
      url + path,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', connection: 'close', ...headers },
        signal: ac.signal,
      },
      (res) => {
        let buf = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (buf += c));
        const ended = new Promise<void>((r) => {
          res.on('end', r);
          res.on('close', r);
        });
        res.on('error', () => {});
        resolve({ res, text: () => buf, ended, abort: () => ac.abort() });
      },
    );
    req.on('error', (e) => {
      if ((e as { name?: string }).name !== 'AbortError') reject(e);
    });
    req.end(JSON.stringify(body));
  });
}

/**
 * Resolves once `done()` holds for what the stream has received, checking at once (the bytes may
 * have arrived with the headers) and after every chunk.
 */
export function until(st: { res: http.IncomingMessage }, done: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    if (done()) return resolve();
    const check = () => {
      if (!done()) return;
      st.res.off('data', check);
      resolve();
    };
    st.res.on('data', check);
  });
}

/** Splits an SSE body into the payloads of its `data: ` events, checking the framing strictly. */
export function sseData(body: string): string[] {
  if (!body.endsWith('\n\n'))
    throw new Error(`SSE body does not end with a blank line: ${JSON.stringify(body.slice(-40))}`);
  const events = body.slice(0, -2).split('\n\n');
  return events.map((e) => {
    if (!e.startsWith('data: ') || e.includes('\n'))
      throw new Error(`not a single-line data event: ${JSON.stringify(e)}`);
    return e.slice('data: '.length);
  });
}

/** Splits a typed SSE body (`event: <type>\ndata: <json>\n\n`, the Responses API) strictly. */
export function sseEvents(body: string): { event: string; data: Record<string, unknown> }[] {
  if (!body.endsWith('\n\n'))
    throw new Error(`SSE body does not end with a blank line: ${JSON.stringify(body.slice(-40))}`);
  return body
    .slice(0, -2)
    .split('\n\n')
    .map((e) => {
      const m = /^event: (\S+)\ndata: (.*)$/.exec(e);
      if (!m || m[2]!.includes('\n')) throw new Error(`not an event/data pair: ${JSON.stringify(e)}`);
      return { event: m[1]!, data: JSON.parse(m[2]!) as Record<string, unknown> };
    });
}

export async function eventually<T>(fn: () => Promise<T> | T, timeoutMs = 5000, intervalMs = 10): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  }
}

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  types: Map<string, string>;
  help: Map<string, string>;
  samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)/;
const VALUE = /^(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]Inf|NaN)$/;

/** A strict parser of the Prometheus text format (0.0.4): throws on any line outside the grammar. */
export function parsePrometheus(text: string): Exposition {
  if (!text.endsWith('\n')) throw new Error('exposition must end with a newline');
  const types = new Map<string, string>();
  const help = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.slice(0, -1).split('\n')) {
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
      if (!m) throw new Error(`bad comment line: ${line}`);
      if (!METRIC_NAME.test(m[2]!)) throw new Error(`bad metric name: ${line}`);
      if (m[1] === 'TYPE') {
        if (!/^(counter|gauge|histogram|summary|untyped)$/.test(m[3]!)) throw new Error(`bad type: ${line}`);
        if (types.has(m[2]!)) throw new Error(`duplicate TYPE: ${line}`);
        types.set(m[2]!, m[3]!);
      } else help.set(m[2]!, m[3]!);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`bad sample line: ${line}`);
    const labels: Record<string, string> = {};
    let rest = m[2] ?? '';
    while (rest.length > 0) {
      const l = LABEL.exec(rest);
      if (!l) throw new Error(`bad labels: ${line}`);
      labels[l[1]!] = l[2]!;
      rest = rest.slice(l[0].length);
    }
    if (!VALUE.test(m[3]!)) throw new Error(`bad value: ${line}`);
    const family = m[1]!.replace(/_(bucket|count|sum)$/, '');
    if (!types.has(m[1]!) && !(types.get(family) === 'histogram'))
      throw new Error(`sample without a TYPE line: ${line}`);
    samples.push({ name: m[1]!, labels, value: Number(m[3]!.replace('Inf', 'Infinity')) });
  }
  return { types, help, samples };
}

export function sample(e: Exposition, name: string, labels: Record<string, string> = {}): number {
  const s = e.samples.find(
    (x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v),
  );
  if (!s) throw new Error(`no sample ${name} ${JSON.stringify(labels)}`);
  return s.value;
}

export async function scrape(url: string): Promise<Exposition> {
  const r = await request(url, '/metrics');
  return parsePrometheus(r.body);
}

export interface Spawned {
  child: ChildProcessWithoutNullStreams;
  stdout: () => string;
  stderr: () => string;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Runs the CLI as the operator would: `node --import tsx main.ts <vllm args>`. */
export function spawnCli(args: string[], env: Record<string, string> = {}): Spawned {
  const child = spawn(process.execPath, ['--import', 'tsx', cli, ...args], {
    cwd: repoRoot,
    env: { ...process.env, HF_TOKEN: '', HUGGING_FACE_HUB_TOKEN: '', ...env },
  });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (err += c));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.on('exit', (code, signal) => r({ code, signal })),
  );
  return { child, stdout: () => out, stderr: () => err, exit };
}
