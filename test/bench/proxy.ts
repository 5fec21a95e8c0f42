// Proxy overhead (issue 6): the same requests sent directly to an engine simulator, through a bare
// undici proxy (the baseline: node:http + undici, no auth, no JSON parse) and through Berth's
// `/api/d/{id}/…` proxy, in the same run, alternating so all three see the same machine load.
//
// Processes: this one is the load generator; each engine simulator is its own process (the CLI);
// Berth and the bare proxy each run in their own process (test/bench/proxy-server.ts) that reports
// its CPU time (process.cpuUsage) and memory over an IPC channel, so a proxy's CPU per request is
// its own process's CPU delta divided by the requests, free of the load generator's and the
// simulator's. Berth is the real Express app (createApp) on a fresh PostgreSQL database (keys are
// verified by the key service, warm) with an in-memory endpoint runtime (test/bench/memory-runtime.ts)
// instead of Kubernetes. All traffic goes to 127.0.0.1; every loop is bounded in count and time.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { spawnEngineSim, type SpawnedEngineSim } from '@berth/engine-sim';
import { createTestDatabase } from '../support/postgres.ts';
import { BENCH_ENDPOINT_ID } from '../support/memory-runtime.ts';
import type { Command, Reply } from './proxy-server.ts';
import { machine, summarize } from './stats.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const serverScript = fileURLToPath(new URL('./proxy-server.ts', import.meta.url));
/**
 * Another checkout of Berth (e.g. main's code, with its own node_modules) whose proxy runs beside
 * this tree's in the same rounds: before/after figures measured under the same load.
 */
const BASELINE = process.env.BENCH_PROXY_BASELINE;
export const ADMIN_TOKEN = 'bench-admin-token-0123456789';
const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const LAT_N = env('BENCH_PROXY_REQUESTS', 3000);
const TTFB_N = env('BENCH_PROXY_STREAMS', 2000);
const CPU_N = env('BENCH_PROXY_CPU_REQUESTS', 6000);
const CHUNK_STREAMS = env('BENCH_PROXY_CPU_STREAMS', 192);
const HELD = env('BENCH_PROXY_HELD', 1000);
export const CPU_CONCURRENCY = 16;
/** The model the benchmark endpoints serve (the API answers 400 to calls naming another). */
export const BENCH_MODEL = 'berth/bench';
const CHUNK_TOKENS = 256;

// ---------------------------------------------------------------- processes

type Sim = SpawnedEngineSim;
const startSim = (args: string[]) => spawnEngineSim(args);

export async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
  if (child.exitCode === null) child.kill('SIGKILL');
}

export class Proxy {
  readonly name: string;
  readonly mode: 'berth' | 'bare';
  readonly child: ChildProcess;
  readonly url: string;
  private waiting: ((m: Reply) => void)[] = [];
  private constructor(name: string, mode: 'berth' | 'bare', child: ChildProcess, url: string) {
    this.name = name;
    this.mode = mode;
    this.child = child;
    this.url = url;
  }

  static async start(
    mode: 'berth' | 'bare',
    extraEnv: Record<string, string> = {},
    name: string = mode,
    tree: string = root,
  ): Promise<Proxy> {
    const nodeArgs = process.env.BENCH_PROXY_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
    const script = tree === root ? serverScript : path.join(tree, 'test/bench/proxy-server.ts');
    // This checkout's Berth runs as `npm start` runs it (Node's own type stripping); another
    // checkout may predate erasable-only TypeScript, so tsx compiles it.
    const loader = tree === root ? [] : ['--import', 'tsx'];
    const child = spawn(process.execPath, [...nodeArgs, ...loader, script, mode], {
      cwd: tree,
      env: { ...process.env, ADMIN_TOKEN, ...extraEnv },
      // Berth's access log (LOG_LEVEL info) goes to stdout, as in production: into /dev/null here.
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${mode} did not start in 120 s`)), 120_000);
      child.once('message', (m: Reply) => {
        clearTimeout(timer);
        if (m.type === 'listening') resolve(m.port);
        else reject(new Error(`unexpected ${m.type}`));
      });
      child.once('exit', (code) => reject(new Error(`${mode} exited with ${code}`)));
    });
    const p = new Proxy(name, mode, child, `http://127.0.0.1:${port}`);
    child.on('message', (m: Reply) => p.waiting.shift()?.(m));
    return p;
  }

  ask(c: Command): Promise<Reply> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.name}: no answer to ${c.type}`)), 10_000);
      this.waiting.push((m) => (clearTimeout(timer), resolve(m)));
      this.child.send(c);
    });
  }

  async stats(): Promise<{ cpuUs: number; rssBytes: number; heapUsed: number }> {
    const m = await this.ask({ type: 'stats' });
    if (m.type !== 'stats') throw new Error(`unexpected ${m.type}`);
    return m;
  }

  /** Peak resident set since the process started (VmHWM). */
  hwmBytes(): number {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${this.child.pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : NaN;
  }

  /** Disconnecting makes it exit by itself (so `--cpu-prof` can write); SIGTERM otherwise. */
  async stop() {
    const c = this.child;
    if (c.exitCode !== null || c.signalCode !== null) return;
    if (c.connected) {
      const exited = new Promise((r) => c.once('exit', r));
      c.disconnect();
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
    }
    await stop(c);
  }
}

// ---------------------------------------------------------------- requests

export interface Target {
  name: string;
  /** Base of the OpenAI routes: `<sim>/v1`, `<bare>/api/d/<id>`, `<berth>/api/d/<id>`. */
  base: string;
  headers: Record<string, string>;
  /** One keep-alive connection, for sequential latency measurements. */
  single: Agent;
  /** Unlimited connections, for concurrent load. */
  many: Agent;
  /** The body's `model` (default BENCH_MODEL; an Elastic display name for the catalog routes). */
  model?: string;
}

export function target(
  name: string,
  base: string,
  headers: Record<string, string> = {},
  model?: string,
): Target {
  return {
    name,
    base,
    ...(model ? { model } : {}),
    headers: { 'content-type': 'application/json', ...headers },
    single: new Agent({ connections: 1, pipelining: 1, keepAliveTimeout: 60_000 }),
    many: new Agent({ connections: null, pipelining: 1, keepAliveTimeout: 60_000 }),
  };
}

function chat(model: string, tokens: number, stream: boolean, i: number): string {
  return JSON.stringify({
    model,
    messages: [{ role: 'user', content: `benchmark request number ${i}` }],
    max_tokens: tokens,
    ignore_eos: true,
    ...(stream ? { stream: true } : {}),
  });
}

const DONE = Buffer.from('data: [DONE]\n\n');
const EVENT = Buffer.from('\n\n');

function countEvents(buf: Buffer): number {
  let n = 0;
  for (let i = buf.indexOf(EVENT); i !== -1; i = buf.indexOf(EVENT, i + 2)) n++;
  return n;
}

interface Sample {
  /** ms from sending to the whole answer (non-streaming) or to the first body byte (streaming). */
  ms: number;
  /** Wall-clock time (ms since the epoch) of the first body byte. */
  firstAt: number;
  events: number;
  ok: boolean;
}

async function call(t: Target, body: string, opts: { stream: boolean; agent: Agent }): Promise<Sample> {
  const t0 = performance.now();
  let first = 0;
  let events = 0;
  let tail = Buffer.alloc(0);
  try {
    const res = await request(`${t.base}/chat/completions`, {
      method: 'POST',
      headers: t.headers,
      body,
      dispatcher: opts.agent,
      headersTimeout: 120_000,
      bodyTimeout: 120_000,
    });
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      if (!first) first = performance.now();
      if (opts.stream) {
        events += countEvents(chunk);
        tail = Buffer.concat([tail, chunk]).subarray(-DONE.length);
      }
    }
    const end = performance.now();
    const ok = res.statusCode === 200 && (!opts.stream || tail.equals(DONE));
    return {
      ms: opts.stream ? first - t0 : end - t0,
      firstAt: performance.timeOrigin + first,
      events,
      ok,
    };
  } catch {
    return { ms: NaN, firstAt: NaN, events, ok: false };
  }
}

export async function sequential(t: Target, n: number, stream: boolean, tokens: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const s = await call(t, chat(t.model ?? BENCH_MODEL, tokens, stream, i), { stream, agent: t.single });
    if (!s.ok) throw new Error(`${t.name}: request failed`);
    out.push(s.ms);
  }
  return out;
}

export async function concurrent(
  t: Target,
  n: number,
  parallel: number,
  stream: boolean,
  tokens: number,
): Promise<{ ok: number; events: number }> {
  let next = 0;
  let ok = 0;
  let events = 0;
  const deadline = performance.now() + 120_000;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < n && performance.now() < deadline) {
        const s = await call(t, chat(t.model ?? BENCH_MODEL, tokens, stream, next++), {
          stream,
          agent: t.many,
        });
        if (s.ok) ok++;
        events += s.events;
      }
    }),
  );
  return { ok, events };
}

// ---------------------------------------------------------------- formatting

export const f = (x: number, d = 3) => x.toFixed(d);
export const signed = (x: number, d = 3) => (x >= 0 ? '+' : '−') + Math.abs(x).toFixed(d);
const mib = (bytes: number) => bytes / 1048576;
const openFilesLimit = () =>
  /Max open files\s+(\d+)/.exec(readFileSync('/proc/self/limits', 'utf8'))?.[1] ?? 'unknown';
export const verdict = (ok: boolean, over: number, unit: string) =>
  ok
    ? '**met**'
    : `**not met** (by ${f(over, unit === '×' ? 2 : unit === 'ms' && over >= 10 ? 0 : 3)}${unit === '×' ? '' : ' '}${unit})`;

// ---------------------------------------------------------------- the benchmark

export async function newKey(berth: { url: string }): Promise<{ account: string; key: string }> {
  const res = await request(`${berth.url}/admin/accounts`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'bench' }),
  });
  const body = (await res.body.json()) as { account: { id: string }; key: { value: string } };
  if (res.statusCode !== 201) throw new Error(`account: ${res.statusCode}`);
  return { account: body.account.id, key: body.key.value };
}

type Row = [target: string, measured: string, verdict: string];
interface Part {
  md: string[];
  rows: Row[];
}

const baselineVariant = { name: 'baseline', env: {}, tree: BASELINE };

/** What the parts share: the database, the account, and every process to stop at the end. */
class Context {
  readonly db: { url: string };
  acct?: { account: string; auth: Record<string, string> };
  readonly children: ChildProcess[] = [];
  readonly proxies: Proxy[] = [];
  constructor(db: { url: string }) {
    this.db = db;
  }

  async sim(args: string[]): Promise<Sim> {
    const sim = await startSim([...args, '--served-model-name', BENCH_MODEL, '--max-num-seqs', '4096']);
    this.children.push(sim.child);
    return sim;
  }

  /** A proxy process; Berth gets the bench account's endpoint in the given phase. */
  async proxy(
    mode: 'berth' | 'bare',
    upstream: string,
    phase: 'up' | 'hibernated' = 'up',
    variant?: { name: string; env: Record<string, string>; tree?: string },
  ): Promise<Proxy> {
    const env = mode === 'berth' ? { DATABASE_URL: this.db.url, ...variant?.env } : {};
    const p = await Proxy.start(mode, env, variant?.name, variant?.tree);
    this.proxies.push(p);
    if (phase === 'up') await p.ask({ type: 'addresses', addresses: [upstream] });
    if (mode === 'berth') {
      if (!this.acct) {
        const k = await newKey(p);
        this.acct = { account: k.account, auth: { authorization: `Bearer ${k.key}` } };
      }
      await p.ask({ type: 'endpoint', account: this.acct.account, phase });
    }
    return p;
  }

  target(p: Proxy): Target {
    return target(p.name, `${p.url}/api/d/${BENCH_ENDPOINT_ID}`, p.mode === 'berth' ? this.acct!.auth : {});
  }

  async close() {
    for (const p of this.proxies) await p.stop();
    for (const c of this.children) await stop(c);
  }
}

/** Non-streaming latency and time to first SSE byte: direct, bare, Berth. */
async function latency(ctx: Context): Promise<Part> {
  const sim = await ctx.sim(['--ttft-ms', '0', '--itl-ms', '0']);
  const berth = await ctx.proxy('berth', sim.url);
  const bare = await ctx.proxy('bare', sim.url);
  const base = BASELINE ? await ctx.proxy('berth', sim.url, 'up', baselineVariant) : undefined;
  const targets = [target('direct', `${sim.url}/v1`), ctx.target(bare), ctx.target(berth)];
  if (base) targets.push(ctx.target(base));
  // Warm-up: JIT, connections, the key cache.
  for (const t of targets) {
    await sequential(t, 500, false, 16);
    await sequential(t, 300, true, 16);
  }
  // One request per path in turn (rotating which goes first), so a burst of load from outside the
  // benchmark hits the three paths alike.
  const lat: Record<string, number[]> = { direct: [], bare: [], berth: [], baseline: [] };
  const ttfb: Record<string, number[]> = { direct: [], bare: [], berth: [], baseline: [] };
  for (let i = 0; i < Math.max(LAT_N, TTFB_N); i++) {
    const order = targets.map((_, k) => targets[(k + i) % targets.length]!);
    if (i < LAT_N) for (const t of order) lat[t.name]!.push(...(await sequential(t, 1, false, 16)));
    if (i < TTFB_N) for (const t of order) ttfb[t.name]!.push(...(await sequential(t, 1, true, 16)));
  }
  for (const t of targets) await Promise.all([t.single.close(), t.many.close()]);
  await berth.stop();
  await bare.stop();
  await base?.stop();
  const L = { direct: summarize(lat.direct!), bare: summarize(lat.bare!), berth: summarize(lat.berth!) };
  const T = { direct: summarize(ttfb.direct!), bare: summarize(ttfb.bare!), berth: summarize(ttfb.berth!) };
  const baseline = base
    ? [
        '',
        `Baseline: the same rounds also went through Berth built from \`${BASELINE}\` (another checkout), one more path in the rotation.`,
        '',
        '| figure | added by Berth (this tree) | added by Berth (baseline) | this tree − baseline |',
        '|---|---|---|---|',
        ...(['p50', 'p99', 'mean'] as const).map((k) => {
          const b = summarize(lat.baseline!)[k] - L.direct[k];
          const n = L.berth[k] - L.direct[k];
          return `| non-streaming ${k} | ${signed(n)} ms | ${signed(b)} ms | ${signed(n - b)} ms |`;
        }),
        ...(['p50', 'p99'] as const).map((k) => {
          const b = summarize(ttfb.baseline!)[k] - T.direct[k];
          const n = T.berth[k] - T.direct[k];
          return `| first SSE byte ${k} | ${signed(n)} ms | ${signed(b)} ms | ${signed(n - b)} ms |`;
        }),
      ]
    : [];
  const added50 = L.berth.p50 - L.direct.p50;
  const added99 = L.berth.p99 - L.direct.p99;
  const addedFirst = T.berth.p50 - T.direct.p50;
  const row = (name: string, k: 'p50' | 'p99' | 'mean', x: typeof L) =>
    `| ${name} | ${f(x.direct[k])} ms | ${f(x.bare[k])} ms | ${f(x.berth[k])} ms | ${signed(x.bare[k] - x.direct[k])} ms | ${signed(x.berth[k] - x.direct[k])} ms | ${signed(x.berth[k] - x.bare[k])} ms |`;
  return {
    md: [
      `Latency: ${LAT_N} non-streamed chat completions (16 tokens) and ${TTFB_N} streamed ones (16 tokens, \`stream: true\` without \`include_usage\`, so Berth adds it upstream and strips the usage event on the way back) per path, ` +
        `sequential on one keep-alive connection per path, one request per path in turn (the order rotating), after a warm-up of 800 per path. ` +
        `Simulator: TTFT 0, ITL 0. Non-streaming is the time to the whole answer; first byte is the time to the first body byte (the first SSE event).`,
      '',
      '| figure | direct | bare undici proxy | Berth | added by bare | added by Berth | Berth − bare |',
      '|---|---|---|---|---|---|---|',
      row('non-streaming p50', 'p50', L),
      row('non-streaming p99', 'p99', L),
      row('non-streaming mean', 'mean', L),
      row('first SSE byte p50', 'p50', T),
      row('first SSE byte p99', 'p99', T),
      ...baseline,
    ],
    rows: [
      [
        '≤ 0.5 ms added p50 (non-streaming)',
        `${signed(added50)} ms (bare proxy: ${signed(L.bare.p50 - L.direct.p50)} ms)`,
        verdict(added50 <= 0.5, added50 - 0.5, 'ms'),
      ],
      [
        '≤ 2 ms added p99 (non-streaming)',
        `${signed(added99)} ms (bare proxy: ${signed(L.bare.p99 - L.direct.p99)} ms)`,
        verdict(added99 <= 2, added99 - 2, 'ms'),
      ],
      [
        '≤ 1 ms added to the first byte (p50)',
        `${signed(addedFirst)} ms (p99: ${signed(T.berth.p99 - T.direct.p99)} ms)`,
        verdict(addedFirst <= 1, addedFirst - 1, 'ms'),
      ],
    ],
  };
}

/** CPU of the proxy process per non-streamed request and per SSE chunk: bare vs Berth. */
async function cpu(ctx: Context): Promise<Part> {
  const ROUNDS = 6;
  const measure = async (
    pairs: [Target, Proxy][],
    n: number,
    stream: boolean,
    tokens: number,
  ): Promise<Record<string, { us: number; n: number; events: number }>> => {
    const acc: Record<string, { us: number; n: number; events: number }> = {};
    for (const [t] of pairs) await concurrent(t, stream ? 64 : 500, CPU_CONCURRENCY, stream, tokens);
    for (let r = 0; r < ROUNDS; r++) {
      const k = r % pairs.length;
      for (const [t, p] of [...pairs.slice(k), ...pairs.slice(0, k)]) {
        const before = await p.stats();
        const res = await concurrent(t, n / ROUNDS, CPU_CONCURRENCY, stream, tokens);
        const after = await p.stats();
        if (res.ok !== n / ROUNDS) throw new Error(`${t.name}: ${res.ok} of ${n / ROUNDS} answered`);
        const a = (acc[p.name] ??= { us: 0, n: 0, events: 0 });
        a.us += after.cpuUs - before.cpuUs;
        a.n += res.ok;
        a.events += res.events;
      }
    }
    return acc;
  };
  const simFast = await ctx.sim(['--ttft-ms', '0', '--itl-ms', '0']);
  // Berth as configured by default (LOG_LEVEL info: one access-log line per request, to stdout),
  // and with the access log off, to show its share.
  const quietEnv = { name: 'quiet', env: { LOG_LEVEL: 'warn' } };
  const berth = await ctx.proxy('berth', simFast.url);
  const quiet = await ctx.proxy('berth', simFast.url, 'up', quietEnv);
  const bare = await ctx.proxy('bare', simFast.url);
  const base = BASELINE ? await ctx.proxy('berth', simFast.url, 'up', baselineVariant) : undefined;
  const req = await measure(
    [
      [ctx.target(bare), bare],
      [ctx.target(berth), berth],
      [ctx.target(quiet), quiet],
      ...(base ? [[ctx.target(base), base] as [Target, Proxy]] : []),
    ],
    CPU_N,
    false,
    16,
  );
  await berth.stop();
  await quiet.stop();
  await bare.stop();
  await base?.stop();
  // 256-token streams with a 1 ms inter-token latency, so each token is its own event on the wire
  // (at ITL 0 the simulator batches hundreds of events per write).
  const simChunks = await ctx.sim(['--ttft-ms', '0', '--itl-ms', '1']);
  const berth2 = await ctx.proxy('berth', simChunks.url);
  const quiet2 = await ctx.proxy('berth', simChunks.url, 'up', quietEnv);
  const bare2 = await ctx.proxy('bare', simChunks.url);
  const base2 = BASELINE ? await ctx.proxy('berth', simChunks.url, 'up', baselineVariant) : undefined;
  const chunks = await measure(
    [
      [ctx.target(bare2), bare2],
      [ctx.target(berth2), berth2],
      [ctx.target(quiet2), quiet2],
      ...(base2 ? [[ctx.target(base2), base2] as [Target, Proxy]] : []),
    ],
    CHUNK_STREAMS,
    true,
    CHUNK_TOKENS,
  );
  await berth2.stop();
  await quiet2.stop();
  await bare2.stop();
  await base2?.stop();
  const perReq = (m: string) => req[m]!.us / req[m]!.n;
  const perChunk = (m: string) => chunks[m]!.us / chunks[m]!.events;
  const perStream = (m: string) => chunks[m]!.us / chunks[m]!.n;
  const reqRatio = perReq('berth') / perReq('bare');
  const chunkRatio = perChunk('berth') / perChunk('bare');
  return {
    md: [
      `CPU: user + system time of the proxy process (process.cpuUsage, reported by the process itself over IPC) across ${CPU_N} non-streamed requests (16 tokens) and ${CHUNK_STREAMS} streams of ${CHUNK_TOKENS} tokens (simulator ITL 1 ms, so each token is its own SSE event) per proxy, 16 in flight, in ${ROUNDS} rounds rotating the order of the processes, after a warm-up. Berth runs as configured by default (LOG_LEVEL info: one JSON access-log line per request on stdout, here /dev/null) and, as a second process, with LOG_LEVEL warn (no access log) to show that line's share. Per chunk = the process's CPU over the streams divided by the SSE events the client received (so it includes each stream's per-request share).`,
      '',
      '| figure | bare undici proxy | Berth | Berth / bare | Berth, no access log | no access log / bare |',
      '|---|---|---|---|---|---|',
      `| CPU per non-streamed request | ${f(perReq('bare'), 0)} µs | ${f(perReq('berth'), 0)} µs | ${f(reqRatio, 2)}× | ${f(perReq('quiet'), 0)} µs | ${f(perReq('quiet') / perReq('bare'), 2)}× |`,
      `| CPU per SSE chunk (event) | ${f(perChunk('bare'), 2)} µs | ${f(perChunk('berth'), 2)} µs | ${f(chunkRatio, 2)}× | ${f(perChunk('quiet'), 2)} µs | ${f(perChunk('quiet') / perChunk('bare'), 2)}× |`,
      `| CPU per ${CHUNK_TOKENS}-token stream | ${f(perStream('bare'), 0)} µs | ${f(perStream('berth'), 0)} µs | ${f(perStream('berth') / perStream('bare'), 2)}× | ${f(perStream('quiet'), 0)} µs | ${f(perStream('quiet') / perStream('bare'), 2)}× |`,
      `| SSE events received by the client | ${chunks.bare!.events} | ${chunks.berth!.events} | | ${chunks.quiet!.events} | |`,
      ...(req.baseline
        ? [
            '',
            `Baseline (Berth from \`${BASELINE}\`, a fourth process in the same rotation): ${f(perReq('baseline'), 0)} µs per request (${f(perReq('baseline') / perReq('bare'), 2)}× bare; this tree / baseline ${f(perReq('berth') / perReq('baseline'), 2)}×), ${f(perChunk('baseline'), 2)} µs per SSE chunk (${f(perChunk('baseline') / perChunk('bare'), 2)}× bare; this tree / baseline ${f(perChunk('berth') / perChunk('baseline'), 2)}×).`,
          ]
        : []),
    ],
    rows: [
      [
        'CPU ≤ 1.3× the bare proxy’s, per request',
        `${f(reqRatio, 2)}×`,
        verdict(reqRatio <= 1.3, reqRatio - 1.3, '×'),
      ],
      [
        'CPU ≤ 1.3× the bare proxy’s, per SSE chunk',
        `${f(chunkRatio, 2)}×`,
        verdict(chunkRatio <= 1.3, chunkRatio - 1.3, '×'),
      ],
    ],
  };
}

/** HELD concurrent streams through one fresh process: memory before / peak / after. */
async function streams(ctx: Context): Promise<Part> {
  const sim = await ctx.sim(['--ttft-ms', '0', '--itl-ms', '50']);
  const held: Record<
    string,
    { before: number; peak: number; hwm: number; after: number; ok: number; wallS: number }
  > = {};
  for (const mode of ['bare', 'berth'] as const) {
    const p = await ctx.proxy(mode, sim.url);
    const t = ctx.target(p);
    await concurrent(t, 100, 20, true, 20);
    await new Promise((r) => setTimeout(r, 1000));
    const before = (await p.stats()).rssBytes;
    let peak = before;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        peak = Math.max(peak, (await p.stats()).rssBytes);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const t0 = performance.now();
    const res = await Promise.all(
      Array.from({ length: HELD }, (_, i) =>
        call(t, chat(BENCH_MODEL, 200, true, i), { stream: true, agent: t.many }),
      ),
    );
    const wallS = (performance.now() - t0) / 1000;
    sampling = false;
    await sampler;
    await new Promise((r) => setTimeout(r, 2000));
    held[mode] = {
      before,
      peak,
      hwm: p.hwmBytes(),
      after: (await p.stats()).rssBytes,
      ok: res.filter((s) => s.ok && s.events >= 201).length,
      wallS,
    };
    await Promise.all([t.single.close(), t.many.close()]);
    await p.stop();
  }
  const hb = held.berth!;
  const growthMB = (Math.max(hb.peak, hb.hwm) - hb.before) / 1e6;
  return {
    md: [
      `Held streams: ${HELD} streamed requests opened at once through one fresh proxy process (simulator ITL 50 ms, 200 tokens: about 10 s each; ${HELD} client connections in, ${HELD} upstream connections out), after a warm-up of 100 streams. RSS from process.memoryUsage sampled every 100 ms; the peak also from VmHWM. A stream is complete when it is HTTP 200, carries all 200 token events and ends in \`data: [DONE]\`.`,
      '',
      '| proxy | complete | RSS before | RSS peak (sampled / VmHWM) | RSS 2 s after | growth (peak − before) | wall s |',
      '|---|---|---|---|---|---|---|',
      ...(['bare', 'berth'] as const).map((m) => {
        const h = held[m]!;
        return `| ${m === 'bare' ? 'bare undici proxy' : 'Berth'} | ${h.ok}/${HELD} | ${f(mib(h.before), 0)} MiB | ${f(mib(h.peak), 0)} / ${f(mib(h.hwm), 0)} MiB | ${f(mib(h.after), 0)} MiB | ${f(mib(Math.max(h.peak, h.hwm) - h.before), 0)} MiB | ${f(h.wallS, 1)} |`;
      }),
    ],
    rows: [
      [
        `${HELD} streams through one API process, memory growth ≤ 100 MB`,
        `${hb.ok}/${HELD} complete, +${f(growthMB, 0)} MB`,
        verdict(hb.ok === HELD && growthMB <= 100, growthMB - 100, 'MB'),
      ],
    ],
  };
}

/**
 * Wake: HELD requests held against a hibernated endpoint with no address, then one ready address
 * appears; time from that moment (taken inside the proxy process) to each request's first byte.
 * The bare proxy, given the same hold (it queues requests until it has an upstream), is the baseline.
 */
async function wake(ctx: Context): Promise<Part> {
  const sim = await ctx.sim(['--ttft-ms', '0', '--itl-ms', '0']);
  const out: Record<string, { release: number[]; held: number; answered: number; cpuMs?: number }> = {};
  for (const mode of ['bare', 'berth'] as const) {
    const p = await ctx.proxy(mode, sim.url);
    let t = ctx.target(p);
    // Warm the code path (and Berth's key cache) while up, then take the address away.
    await concurrent(t, 200, 20, true, 16);
    await Promise.all([t.single.close(), t.many.close()]);
    await p.ask({ type: 'addresses', addresses: [] });
    if (mode === 'berth') await p.ask({ type: 'endpoint', account: ctx.acct!.account, phase: 'hibernated' });
    t = ctx.target(p);
    const pending = Array.from({ length: HELD }, (_, i) =>
      call(t, chat(BENCH_MODEL, 16, true, i), { stream: true, agent: t.many }),
    );
    const deadline = performance.now() + 60_000;
    let held = 0;
    while (performance.now() < deadline) {
      const m = await p.ask({ type: 'inflight' });
      held = m.type === 'inflight' ? m.n : 0;
      if (held >= HELD) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await new Promise((r) => setTimeout(r, 500));
    const cpu0 = (await p.stats()).cpuUs;
    const flip = await p.ask({ type: 'addresses', addresses: [sim.url] });
    const at = flip.type === 'flipped' ? flip.at : NaN;
    const done = await Promise.all(pending);
    out[mode] = {
      release: done.filter((s) => s.ok).map((s) => s.firstAt - at),
      held,
      answered: done.filter((s) => s.ok).length,
      cpuMs: ((await p.stats()).cpuUs - cpu0) / 1000,
    };
    await Promise.all([t.single.close(), t.many.close()]);
    await p.stop();
  }
  // The floor on this machine: the same requests sent at once straight to the simulator on fresh
  // connections, timed from the moment they are sent.
  {
    const t = target('direct', `${sim.url}/v1`);
    const at = performance.timeOrigin + performance.now();
    const done = await Promise.all(
      Array.from({ length: HELD }, (_, i) =>
        call(t, chat(BENCH_MODEL, 16, true, i), { stream: true, agent: t.many }),
      ),
    );
    out.direct = {
      release: done.filter((s) => s.ok).map((s) => s.firstAt - at),
      held: 0,
      answered: done.filter((s) => s.ok).length,
    };
    await Promise.all([t.single.close(), t.many.close()]);
  }
  const b = out.berth!;
  const max = Math.max(...b.release);
  return {
    md: [
      `Wake: ${HELD} streamed requests (16 tokens) sent to an endpoint with no ready address; once all are held (counted by the API's own activity tracker), the in-memory Backends reports one ready address (the simulator, with no connection to it yet). Release = first SSE byte at the client − the moment the address was set, in the proxy process (both wall clocks of this machine). The bare proxy, given the same hold (it queues requests until it has an upstream), is the baseline.`,
      '',
      '| proxy | held / answered | release min | p50 | p99 | max | proxy CPU from release to the last answer |',
      '|---|---|---|---|---|---|---|',
      ...(['direct', 'bare', 'berth'] as const).map((m) => {
        const r = summarize(out[m]!.release);
        const name = {
          direct: 'direct to the simulator (no hold; from the send)',
          bare: 'bare undici proxy',
          berth: 'Berth',
        }[m];
        return `| ${name} | ${m === 'direct' ? '–' : out[m]!.held} / ${out[m]!.answered} | ${f(Math.min(...out[m]!.release), 1)} ms | ${f(r.p50, 1)} ms | ${f(r.p99, 1)} ms | ${f(Math.max(...out[m]!.release), 1)} ms | ${out[m]!.cpuMs === undefined ? '–' : `${f(out[m]!.cpuMs!, 0)} ms (${f((out[m]!.cpuMs! * 1000) / HELD, 0)} µs per request)`} |`;
      }),
    ],
    rows: [
      [
        `${HELD} held requests released ≤ 250 ms after readiness`,
        `${b.answered}/${HELD} answered, last first byte ${f(max, 0)} ms after (p50 ${f(summarize(b.release).p50, 0)} ms)`,
        verdict(b.answered === HELD && max <= 250, max - 250, 'ms'),
      ],
    ],
  };
}

const PARTS = { latency, cpu, streams, wake } as const;
export type ProxyPart = keyof typeof PARTS;

/** The proxy benchmark as Markdown; `parts` picks some of its four measurements (default: all). */
export async function benchProxy(parts: ProxyPart[] = Object.keys(PARTS) as ProxyPart[]): Promise<string> {
  const load = os.loadavg();
  const db = await createTestDatabase('proxy');
  const ctx = new Context(db);
  try {
    const md: string[] = [
      `### Result (${new Date().toISOString().slice(0, 10)}, ${machine()}, load average at start ${load.map((x) => x.toFixed(1)).join(' / ')}, open-files limit ${openFilesLimit()})`,
    ];
    const rows: Row[] = [];
    for (const name of parts) {
      const part = await PARTS[name](ctx);
      md.push('', ...part.md);
      rows.push(...part.rows);
    }
    md.push(
      '',
      '| target | measured | verdict |',
      '|---|---|---|',
      ...rows.map((r) => `| ${r.join(' | ')} |`),
    );
    return md.join('\n');
  } finally {
    await ctx.close();
    await db.drop();
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const parts = process.argv.slice(2) as ProxyPart[];
  process.stdout.write((await benchProxy(parts.length ? parts : undefined)) + '\n');
}
