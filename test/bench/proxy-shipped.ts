// `npm run bench proxy-shipped`: the proxy's overhead as a user runs Berth, against the lean baseline,
// all in one run. Berth is `npm start` (apps/api/src/start.mjs) in its own process with a local-mode
// user's settings: BERTH_RUNTIME=local, PostgreSQL (DATABASE_URL), LOG_LEVEL=warn, engines at zero
// latency (BERTH_LOCAL_ENGINE_ARGS). The endpoint is created through the API and served by the local
// runtime's own engine-simulator process; "direct" is that engine (its address read from the
// endpoint's logs) and "lean" is ../shared/bench/bare-proxy.mjs (./lean.ts) pointed at it. Parts:
//   core   — non-streamed latency and first SSE byte, alternating request by request across the
//            paths; CPU per request of each proxy process (/proc/<pid>/task/*/schedstat) over batches
//            rotating across the processes; a client disconnect mid-stream until the engine has no
//            request running;
//   stream — per-chunk CPU and the delay from an upstream chunk to the client, through a stamping
//            upstream (./lean.ts; Berth reaches it as an Elastic catalog model's external backend,
//            through the same forward() and SSE tap as every streamed call);
//   large  — 220 KB prompts, 150 calls in flight: latency and throughput, direct, lean and Berth.
// All traffic to 127.0.0.1; every loop bounded in count and time.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { createTestDatabase } from '../support/postgres.ts';
import { startLean, startStamper, stampedStream, type Lean } from './lean.ts';
import {
  ADMIN_TOKEN,
  BENCH_MODEL,
  concurrent,
  CPU_CONCURRENCY,
  f,
  newKey,
  sequential,
  signed,
  stop,
  target,
  type Target,
} from './proxy.ts';
import { machine, summarize } from './stats.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const LAT_N = env('BENCH_PROXY_REQUESTS', 3000);
const TTFB_N = env('BENCH_PROXY_STREAMS', 1000);
const CPU_N = env('BENCH_PROXY_CPU_REQUESTS', 6000);
const ROUNDS = env('BENCH_PROXY_CPU_ROUNDS', 12);
const ABORTS = env('BENCH_PROXY_ABORTS', 20);
const STAMPED = env('BENCH_PROXY_STAMPED_STREAMS', 200);
const CHUNK_STREAMS = env('BENCH_PROXY_CPU_STREAMS', 192);
const LARGE_N = env('BENCH_PROXY_LARGE_REQUESTS', 900);
const LARGE_KB = 220;
const LARGE_CONCURRENCY = 150;
const TICK_US = 1e6 / 100; // USER_HZ: /proc times are in 1/100 s

/**
 * CPU time of a process, in µs: the nanosecond run time of each of its threads
 * (/proc/<pid>/task/<tid>/schedstat, field 1), summed; /proc/<pid>/stat's 10 ms ticks where that
 * is not available.
 */
export function cpuUs(pid: number): number {
  try {
    let ns = 0;
    for (const tid of readdirSync(`/proc/${pid}/task`))
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    return ns / 1000;
  } catch {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_US; // utime, stime (fields 14 and 15)
  }
}

/** The kind of a process's thread, by its name: where in a Node process the CPU goes. */
function threadKind(pid: number, tid: string): string {
  if (tid === String(pid)) return 'main thread';
  const comm = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
  // Node 24: MainThread, V8Worker ×4 (parallel and concurrent GC, concurrent compilation),
  // DelayedTaskSche, SignalInspector, libuv-worker ×4.
  if (comm.startsWith('V8') || comm === 'DelayedTaskSche') return 'V8 workers (GC, compiler)';
  if (comm.startsWith('libuv-worker')) return 'libuv pool';
  return comm; // WorkerThread (tsx's module hooks), SignalInspector
}

/** cpuUs by thread kind (µs); {} where schedstat is not available. */
export function cpuByKind(pid: number): Record<string, number> {
  const out: Record<string, number> = {};
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const k = threadKind(pid, tid);
      out[k] =
        (out[k] ?? 0) +
        Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]) / 1000;
    }
  } catch {
    return {};
  }
  return out;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

export async function until<T>(
  what: string,
  timeoutMs: number,
  fn: () => Promise<T | undefined>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** `npm start` (start.mjs) with a local-mode user's settings; its endpoint up; the engine's own address. */
export async function startShipped(dbUrl: string, dataDir: string, tree: string = root) {
  const port = await freePort();
  const nodeArgs = process.env.BENCH_PROXY_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const child: ChildProcess = spawn(process.execPath, [...nodeArgs, 'apps/api/src/start.mjs'], {
    cwd: tree,
    env: {
      ...process.env,
      KUBECONFIG: '',
      HOST: '127.0.0.1',
      PORT: String(port),
      DATABASE_URL: dbUrl,
      ADMIN_TOKEN,
      BERTH_RUNTIME: 'local',
      BERTH_DATA_DIR: dataDir,
      LOG_LEVEL: 'warn',
      // A context long enough for the large prompts (220 KB) and the long streams of the abort check.
      BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 0 --max-num-seqs 4096 --max-model-len 1048576',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  try {
    return await provisioned(child, `http://127.0.0.1:${port}`);
  } catch (err) {
    child.kill('SIGKILL'); // nothing of a failed start outlives the benchmark
    throw err;
  }
}

/** Waits for the API, creates the account, key and endpoint, and waits for the endpoint. */
async function provisioned(child: ChildProcess, url: string) {
  const exited = new Promise<never>((_, reject) =>
    child.once('exit', (code) => reject(new Error(`Berth exited with ${code} before listening`))),
  );
  exited.catch(() => {});
  await Promise.race([
    until('Berth listening', 180_000, async () => ((await fetch(url + '/healthz')).ok ? true : undefined)),
    exited,
  ]);
  const { account, key } = await newKey({ url });
  const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };
  const compute = (await (
    await fetch(`${url}/admin/accounts/${account}/keys`, {
      method: 'POST',
      headers: admin,
      body: JSON.stringify({ name: 'bench-compute', scope: 'compute' }),
    })
  ).json()) as { value: string };
  const created = await fetch(`${url}/api/endpoints`, {
    method: 'POST',
    headers: { authorization: `Bearer ${compute.value}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: BENCH_MODEL,
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      scaling: { minReplicas: 1, maxReplicas: 1 },
    }),
  });
  if (created.status !== 201) throw new Error(`endpoint: ${created.status} ${await created.text()}`);
  const { id } = (await created.json()) as { id: string };
  const auth = { authorization: `Bearer ${compute.value}` };
  await until('endpoint up', 180_000, async () => {
    const e = (await (await fetch(`${url}/api/endpoints/${id}`, { headers: auth })).json()) as {
      status: string;
    };
    return e.status === 'up' ? true : undefined;
  });
  const engine = await until('engine address in the logs', 30_000, async () => {
    const logs = await (await fetch(`${url}/api/endpoints/${id}/logs`, { headers: auth })).text();
    return /Starting vLLM API server 0 on (http:\/\/127\.0\.0\.1:\d+)/.exec(logs)?.[1];
  });
  return { child, url, id, engine, auth: { authorization: `Bearer ${key}` } };
}

export type Shipped = Awaited<ReturnType<typeof startShipped>>;

/** Stops `npm start`'s process as a user would (SIGTERM), waiting for it to exit. */
export async function stopShipped(s: Shipped | undefined): Promise<void> {
  if (!s) return;
  const exited = new Promise((r) => s.child.once('exit', r));
  s.child.kill('SIGTERM');
  await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
  await stop(s.child);
}

/** A verdict with its figures: PASS or FAIL (and by how much). */
export const pass = (ok: boolean, over: number, unit: string) =>
  ok ? '**PASS**' : `**FAIL** (by ${f(over, unit === '×' ? 2 : 3)}${unit === '×' ? '×' : ' ' + unit})`;

type Row = [target: string, measured: string, verdict: string];
interface Part {
  md: string[];
  rows: Row[];
}

interface Ctx {
  shipped: Shipped;
  base?: Shipped;
  baseTree?: string;
  /** The lean proxy in front of the endpoint's engine. */
  lean: Lean;
}

const paths = (c: Ctx) => {
  const direct = target('direct', `${c.shipped.engine}/v1`);
  const lean = target('lean', `${c.lean.url}/v1`);
  const berth = target('berth', `${c.shipped.url}/api/d/${c.shipped.id}`, c.shipped.auth);
  const base = c.base && target('baseline', `${c.base.url}/api/d/${c.base.id}`, c.base.auth);
  return { direct, lean, berth, base };
};

/**
 * CPU per request of each proxy process: `n` requests each, 16 in flight, in `rounds` rounds of one
 * batch per process (the order rotating); the total, and each round's ratio to the lean proxy's.
 */
async function cpuRounds(
  procs: [Target, number][],
  n: number,
  rounds: number,
  stream: boolean,
  tokens: number,
): Promise<Record<string, CpuTally>> {
  const cpu: Record<string, CpuTally> = {};
  for (const [t] of procs) await concurrent(t, stream ? 64 : 500, CPU_CONCURRENCY, stream, tokens);
  const batch = Math.round(n / rounds);
  for (let r = 0; r < rounds; r++)
    for (const [t, pid] of [...procs.slice(r % procs.length), ...procs.slice(0, r % procs.length)]) {
      const before = cpuUs(pid);
      const kindsBefore = cpuByKind(pid);
      const res = await concurrent(t, batch, CPU_CONCURRENCY, stream, tokens);
      const after = cpuUs(pid);
      const kindsAfter = cpuByKind(pid);
      if (res.ok !== batch) throw new Error(`${t.name}: ${res.ok} of ${batch} answered`);
      const c = (cpu[t.name] ??= { us: 0, n: 0, events: 0, rounds: [], kinds: {} });
      for (const [k, us] of Object.entries(kindsAfter))
        c.kinds[k] = (c.kinds[k] ?? 0) + us - (kindsBefore[k] ?? 0); // a thread born in the batch counts whole
      c.us += after - before;
      c.n += res.ok;
      c.events += res.events;
      c.rounds.push((after - before) / res.ok);
    }
  return cpu;
}

interface CpuTally {
  us: number;
  n: number;
  events: number;
  rounds: number[];
  /** µs by thread kind (cpuByKind), over all rounds. */
  kinds: Record<string, number>;
}

/** CPU per request by thread kind, µs: "main thread 120.1 · V8 (GC, compiler) 30.2 · …". */
export function byKind(c: CpuTally): string {
  return Object.entries(c.kinds)
    .sort((a, b) => b[1] - a[1])
    .map(([k, us]) => `${k} ${f(us / c.n, 1)}`)
    .join(' · ');
}

/** Median (and range) of each round's ratio of `name`'s CPU to the lean proxy's in the same round. */
function perRound(cpu: Record<string, { rounds: number[] }>, name: string): string {
  const r = cpu[name]!.rounds.map((us, i) => us / cpu.lean!.rounds[i]!).sort((a, b) => a - b);
  const mid = r.length >> 1;
  const median = r.length % 2 ? r[mid]! : (r[mid - 1]! + r[mid]!) / 2;
  return `${f(median, 2)}× (${f(r[0]!, 2)}–${f(r[r.length - 1]!, 2)}×)`;
}

/** The engine's requests running, from its /metrics. */
async function running(engine: string): Promise<number> {
  const text = await (await fetch(`${new URL(engine).origin}/metrics`)).text();
  return Number(/^vllm:num_requests_running\{[^}]*\} (\d+)/m.exec(text)?.[1] ?? NaN);
}

/**
 * A client that leaves mid-stream: a long stream (the engine at ITL 0, held back by the client not
 * reading), its socket destroyed after the first bytes; the time until the engine has no request
 * running (its /metrics polled every 2 ms). Each trial starts with the engine idle and ends with it
 * idle again; a trial where the stream had already ended is not counted.
 */
async function aborts(c: Ctx): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < ABORTS * 2 && out.length < ABORTS; i++) {
    await until('engine idle', 10_000, async () =>
      (await running(c.shipped.engine)) === 0 ? true : undefined,
    );
    const agent = new Agent({ connections: 1 });
    const res = await request(`${c.shipped.url}/api/d/${c.shipped.id}/chat/completions`, {
      method: 'POST',
      headers: { ...c.shipped.auth, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: BENCH_MODEL,
        messages: [{ role: 'user', content: 'a long answer' }],
        max_tokens: 500_000,
        ignore_eos: true,
        stream: true,
      }),
      dispatcher: agent,
    });
    await new Promise<void>((r) => res.body.once('data', () => r()));
    res.body.pause();
    await new Promise((r) => setTimeout(r, 50)); // the engine held back by the full socket
    const before = await running(c.shipped.engine);
    const t0 = performance.now();
    res.body.destroy();
    await agent.destroy();
    let t1 = NaN;
    while (performance.now() - t0 < 5_000) {
      if ((await running(c.shipped.engine)) === 0) {
        t1 = performance.now();
        break;
      }
      await new Promise((r) => setTimeout(r, 2));
    }
    if (before === 1) out.push(t1 - t0);
  }
  return out;
}

/** Non-streamed latency, first SSE byte, CPU per request, and the client-disconnect check. */
async function core(c: Ctx): Promise<Part> {
  const { direct, lean, berth, base } = paths(c);
  const targets = [direct, lean, berth, ...(base ? [base] : [])];
  for (const t of targets) {
    await sequential(t, 500, false, 16); // warm-up: JIT, connections, key cache
    await sequential(t, 200, true, 16);
  }
  const lat: Record<string, number[]> = { direct: [], lean: [], berth: [], baseline: [] };
  const ttfb: Record<string, number[]> = { direct: [], lean: [], berth: [], baseline: [] };
  for (let i = 0; i < Math.max(LAT_N, TTFB_N); i++)
    for (let k = 0; k < targets.length; k++) {
      const t = targets[(k + i) % targets.length]!;
      if (i < LAT_N) lat[t.name]!.push(...(await sequential(t, 1, false, 16)));
      if (i < TTFB_N) ttfb[t.name]!.push(...(await sequential(t, 1, true, 16)));
    }
  const cpu = await cpuRounds(
    [
      [lean, c.lean.child.pid!],
      [berth, c.shipped.child.pid!],
      ...(base ? [[base, c.base!.child.pid!] as [Target, number]] : []),
    ],
    CPU_N,
    ROUNDS,
    false,
    16,
  );
  for (const t of targets) await Promise.all([t.single.close(), t.many.close()]);
  const cut = summarize(await aborts(c));

  const L = Object.fromEntries(Object.entries(lat).map(([k, v]) => [k, summarize(v)]));
  const T = Object.fromEntries(Object.entries(ttfb).map(([k, v]) => [k, summarize(v)]));
  const add = (x: typeof L, name: string, k: 'p50' | 'p99' | 'mean') => x[name]![k] - x.direct![k];
  const per = (name: string) => cpu[name]!.us / cpu[name]!.n;
  const ratio = per('berth') / per('lean');
  const row = (label: string, x: typeof L, k: 'p50' | 'p99' | 'mean') =>
    `| ${label} | ${f(x.direct![k])} ms | ${f(x.lean![k])} ms (${signed(add(x, 'lean', k))}) | ${f(x.berth![k])} ms (${signed(add(x, 'berth', k))}) | ${signed(x.berth![k] - x.lean![k])} ms |` +
    (base ? ` ${f(x.baseline![k])} ms (${signed(add(x, 'baseline', k))}) |` : '');
  const over50 = add(L, 'berth', 'p50') - add(L, 'lean', 'p50');
  const over99 = add(L, 'berth', 'p99') - add(L, 'lean', 'p99');
  const overFirst = add(T, 'berth', 'p50') - add(T, 'lean', 'p50');
  return {
    md: [
      `Non-streamed: ${LAT_N} chat completions (16 tokens) per path; first SSE byte: ${TTFB_N} streamed ones (16 tokens, no \`include_usage\`: Berth asks the engine for usage and strips it on the way back); one keep-alive connection per path, one request per path in turn (the order rotating), after a warm-up of 700 per path. CPU: ${CPU_N} non-streamed requests per proxy, ${CPU_CONCURRENCY} in flight, ${ROUNDS} rounds of one batch per process (the order rotating); each process's CPU time from /proc/<pid>/task/*/schedstat (ns).`,
      '',
      `| figure | direct | lean proxy (added) | Berth \`/api/d/<id>\` (added) | Berth − lean |${base ? ' baseline tree (added) |' : ''}`,
      `|---|---|---|---|---|${base ? '---|' : ''}`,
      row('non-streamed p50', L, 'p50'),
      row('non-streamed p99', L, 'p99'),
      row('non-streamed mean', L, 'mean'),
      row('first SSE byte p50', T, 'p50'),
      row('first SSE byte p99', T, 'p99'),
      '',
      `| CPU per non-streamed request | lean proxy | Berth | Berth / lean |${base ? ' baseline tree | baseline / lean |' : ''}`,
      `|---|---|---|---|${base ? '---|---|' : ''}`,
      `| µs, all rounds | ${f(per('lean'), 1)} | ${f(per('berth'), 1)} | ${f(ratio, 2)}× |${base ? ` ${f(per('baseline'), 1)} | ${f(per('baseline') / per('lean'), 2)}× |` : ''}`,
      `| each round's ratio to the lean proxy's: median (range) | | | ${perRound(cpu, 'berth')} |${base ? ` | ${perRound(cpu, 'baseline')} |` : ''}`,
      `| µs by thread (all rounds) | ${byKind(cpu.lean!)} | ${byKind(cpu.berth!)} | |${base ? ` ${byKind(cpu.baseline!)} | |` : ''}`,
      ...(base ? ['', `Baseline tree: ${c.baseTree}, started the same way, in the same rounds.`] : []),
      '',
      `Client disconnect: ${cut.n} streams (max_tokens 500,000 at ITL 0, held back by a client that stops reading after the first bytes) whose client socket is destroyed; time until the engine has no request running (its /metrics polled every 2 ms): p50 ${f(cut.p50, 1)} ms, max ${f(cut.p99, 1)} ms.`,
    ],
    rows: [
      [
        'CPU per request ≤ 1.3× the lean proxy’s',
        `${f(per('berth'), 1)} µs vs ${f(per('lean'), 1)} µs: ${f(ratio, 2)}× (rounds ${perRound(cpu, 'berth')})`,
        pass(ratio <= 1.3, ratio - 1.3, '×'),
      ],
      [
        'added p50 ≤ the lean proxy’s + 0.15 ms',
        `${signed(add(L, 'berth', 'p50'))} ms vs lean ${signed(add(L, 'lean', 'p50'))} ms (${signed(over50)} ms)`,
        pass(over50 <= 0.15, over50 - 0.15, 'ms'),
      ],
      [
        'added p99 ≤ the lean proxy’s + 1 ms',
        `${signed(add(L, 'berth', 'p99'))} ms vs lean ${signed(add(L, 'lean', 'p99'))} ms (${signed(over99)} ms)`,
        pass(over99 <= 1, over99 - 1, 'ms'),
      ],
      [
        'first SSE byte (p50) ≤ the lean proxy’s + 0.3 ms',
        `${signed(add(T, 'berth', 'p50'))} ms vs lean ${signed(add(T, 'lean', 'p50'))} ms (${signed(overFirst)} ms; p99 ${signed(add(T, 'berth', 'p99'))} vs ${signed(add(T, 'lean', 'p99'))} ms)`,
        pass(overFirst <= 0.3, overFirst - 0.3, 'ms'),
      ],
      [
        'a client disconnect aborts the upstream within 100 ms',
        `${cut.n} of ${ABORTS} streams: max ${f(cut.p99, 1)} ms (p50 ${f(cut.p50, 1)} ms)`,
        pass(cut.n === ABORTS && cut.p99 <= 100, cut.p99 - 100, 'ms'),
      ],
    ],
  };
}

const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };

/** A credited account's key (billing on). */
export async function creditedKey(url: string): Promise<Record<string, string>> {
  const user = await newKey({ url });
  const credit = await fetch(`${url}/admin/accounts/${user.account}/credits`, {
    method: 'POST',
    headers: { ...admin, 'idempotency-key': randomUUID() },
    body: JSON.stringify({ amount: '1000.00', reference: 'bench' }),
  });
  if (credit.status !== 201) throw new Error(`credit: ${credit.status} ${await credit.text()}`);
  return { authorization: `Bearer ${user.key}` };
}

/**
 * Streaming through a stamping upstream: the delay from each chunk's write upstream to its arrival
 * at the client (sequential streams), and CPU per chunk under load (16 streams in flight).
 */
async function stream(c: Ctx): Promise<Part> {
  const paced = await startStamper(2);
  const fast = await startStamper(1);
  const leanPaced = await startLean(paced.url, await freePort());
  const leanFast = await startLean(fast.url, await freePort());
  try {
    const put = async (name: string, baseUrl: string) => {
      const r = await fetch(`${c.shipped.url}/admin/models/${name}`, {
        method: 'PUT',
        headers: admin,
        body: JSON.stringify({
          kind: 'chat',
          backends: [{ baseUrl, model: 'stamp' }],
          pricing: { inputPerMTok: '0.10', outputPerMTok: '0.30' },
        }),
      });
      if (r.status !== 201) throw new Error(`catalog ${name}: ${r.status} ${await r.text()}`);
    };
    await put('bench-stamp', paced.url);
    await put('bench-stamp-fast', fast.url);
    const auth = await creditedKey(c.shipped.url);
    const via = [
      { name: 'direct', url: `${paced.url}/chat/completions`, headers: {}, model: 'stamp' },
      { name: 'lean', url: `${leanPaced.url}/v1/chat/completions`, headers: {}, model: 'stamp' },
      { name: 'berth', url: `${c.shipped.url}/api/chat/completions`, headers: auth, model: 'bench-stamp' },
    ];
    const agents = via.map(() => new Agent({ connections: 1, keepAliveTimeout: 60_000 }));
    const delays: Record<string, number[]> = { direct: [], lean: [], berth: [] };
    for (let i = 0; i < 20 + STAMPED; i++)
      for (let k = 0; k < via.length; k++) {
        const j = (k + i) % via.length;
        const v = via[j]!;
        const d = await stampedStream(v.url, v.headers, v.model, 64, agents[j]!);
        if (i >= 20) delays[v.name]!.push(...d.map((us) => us / 1000));
      }
    await Promise.all(agents.map((a) => a.close()));
    // CPU per chunk: 256-chunk streams, a chunk every ms, 16 in flight.
    const leanT = { ...target('lean', `${leanFast.url}/v1`), model: 'stamp' };
    const berthT = target('berth', `${c.shipped.url}/api`, auth, 'bench-stamp-fast');
    const cpu = await cpuRounds(
      [
        [leanT, leanFast.child.pid!],
        [berthT, c.shipped.child.pid!],
      ],
      CHUNK_STREAMS,
      6,
      true,
      256,
    );
    for (const t of [leanT, berthT]) await Promise.all([t.single.close(), t.many.close()]);
    const D = Object.fromEntries(Object.entries(delays).map(([k, v]) => [k, summarize(v)]));
    const perChunk = (n: string) => cpu[n]!.us / cpu[n]!.events;
    const p99 = D.berth!.p99;
    return {
      md: [
        `Streaming through a stamping upstream (test/bench/lean.ts: vLLM-shaped chunks, each stamped as it is written; usage per chunk and at the end when asked). Berth reaches it as the Elastic catalog model \`bench-stamp\` (an external backend, priced, a credited account: billing on), through the forward() path and SSE usage tap every streamed call takes; the lean proxy is a second copy pointed at it. Delay: ${STAMPED} streams of 64 chunks (one every 2 ms) per path, one at a time, the paths in turn, after 20 each; a chunk's delay is its arrival at the client − its stamp (one clock: this process). CPU per chunk: ${CHUNK_STREAMS} streams of 256 chunks (one every ms), 16 in flight, 6 rounds; the process's CPU over the streams / the events the client received (so each stream's per-request share is in it).`,
        '',
        '| upstream chunk → client | direct | lean proxy | Berth (Elastic, billing on) |',
        '|---|---|---|---|',
        `| p50 | ${f(D.direct!.p50)} ms | ${f(D.lean!.p50)} ms | ${f(D.berth!.p50)} ms |`,
        `| p99 | ${f(D.direct!.p99)} ms | ${f(D.lean!.p99)} ms | ${f(D.berth!.p99)} ms |`,
        `| CPU per chunk | – | ${f(perChunk('lean'), 2)} µs | ${f(perChunk('berth'), 2)} µs (${f(perChunk('berth') / perChunk('lean'), 2)}×) |`,
        `| CPU per 256-chunk stream | – | ${f(cpu.lean!.us / cpu.lean!.n, 0)} µs | ${f(cpu.berth!.us / cpu.berth!.n, 0)} µs |`,
      ],
      rows: [
        [
          'upstream chunk → client ≤ 1 ms p99',
          `${f(p99)} ms (lean ${f(D.lean!.p99)} ms, direct ${f(D.direct!.p99)} ms)`,
          pass(p99 <= 1, p99 - 1, 'ms'),
        ],
      ],
    };
  } finally {
    await leanPaced.stop();
    await leanFast.stop();
    await paced.close();
    await fast.close();
  }
}

/** `n` calls with a `kb` KB prompt, `parallel` in flight: each call's ms, and the wall-clock s. */
async function largeBatch(t: Target, n: number, parallel: number, prompt: string) {
  const body = JSON.stringify({
    model: t.model ?? BENCH_MODEL,
    messages: [{ role: 'user', content: prompt }],
    max_tokens: 16,
    ignore_eos: true,
  });
  const ms: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < n) {
        next++;
        const s = performance.now();
        const res = await request(`${t.base}/chat/completions`, {
          method: 'POST',
          headers: t.headers,
          body,
          dispatcher: t.many,
          headersTimeout: 120_000,
          bodyTimeout: 120_000,
        });
        await res.body.dump();
        if (res.statusCode !== 200) throw new Error(`${t.name}: ${res.statusCode}`);
        ms.push(performance.now() - s);
      }
    }),
  );
  return { ms, s: (performance.now() - t0) / 1000 };
}

/** 220 KB prompts, 150 in flight: latency and throughput per path, rotating batches. */
async function large(c: Ctx): Promise<Part> {
  const { direct, lean, berth } = paths(c);
  const words = 'the quick brown fox jumps over the lazy dog ';
  const prompt = words.repeat(Math.ceil((LARGE_KB * 1000) / words.length)).slice(0, LARGE_KB * 1000);
  const targets = [direct, lean, berth];
  for (const t of targets) await largeBatch(t, LARGE_CONCURRENCY, LARGE_CONCURRENCY, prompt); // warm-up
  const ms: Record<string, number[]> = { direct: [], lean: [], berth: [] };
  const secs: Record<string, number> = { direct: 0, lean: 0, berth: 0 };
  const rounds = 3;
  for (let r = 0; r < rounds; r++)
    for (const t of [...targets.slice(r), ...targets.slice(0, r)]) {
      const b = await largeBatch(t, LARGE_N / rounds, LARGE_CONCURRENCY, prompt);
      ms[t.name]!.push(...b.ms);
      secs[t.name]! += b.s;
    }
  for (const t of targets) await Promise.all([t.single.close(), t.many.close()]);
  const S = Object.fromEntries(Object.entries(ms).map(([k, v]) => [k, summarize(v)]));
  const rps = (n: string) => ms[n]!.length / secs[n]!;
  const added = (n: string, k: 'p50' | 'p99') => S[n]![k] - S.direct![k];
  const a99 = added('berth', 'p99');
  const tput = rps('berth') / rps('lean');
  return {
    md: [
      `Large prompts: ${LARGE_N} non-streamed chat completions per path with a ${LARGE_KB} KB prompt (16 tokens out), ${LARGE_CONCURRENCY} in flight, in 3 rounds of one batch per path (the order rotating), after a warm-up batch of ${LARGE_CONCURRENCY}; throughput = calls / the batches' wall-clock time. The load generator, the engine and the proxy share the machine's cores.`,
      '',
      '| 220 KB prompts, 150 in flight | direct | lean proxy | Berth `/api/d/<id>` |',
      '|---|---|---|---|',
      `| p50 | ${f(S.direct!.p50, 1)} ms | ${f(S.lean!.p50, 1)} ms (${signed(added('lean', 'p50'), 1)}) | ${f(S.berth!.p50, 1)} ms (${signed(added('berth', 'p50'), 1)}) |`,
      `| p99 | ${f(S.direct!.p99, 1)} ms | ${f(S.lean!.p99, 1)} ms (${signed(added('lean', 'p99'), 1)}) | ${f(S.berth!.p99, 1)} ms (${signed(added('berth', 'p99'), 1)}) |`,
      `| calls/s | ${f(rps('direct'), 0)} | ${f(rps('lean'), 0)} | ${f(rps('berth'), 0)} |`,
    ],
    rows: [
      [
        '220 KB prompts at 150 in flight: added p99 ≤ 5 ms',
        `${signed(a99, 1)} ms (lean ${signed(added('lean', 'p99'), 1)} ms)`,
        pass(a99 <= 5, a99 - 5, 'ms'),
      ],
      [
        '220 KB prompts: throughput not capped below the engine’s (≥ 0.9× the lean proxy’s on the same cores)',
        `${f(rps('berth'), 0)} calls/s vs lean ${f(rps('lean'), 0)} (${f(tput, 2)}×), direct ${f(rps('direct'), 0)}`,
        pass(tput >= 0.9, 0.9 - tput, '×'),
      ],
    ],
  };
}

const PARTS = { core, stream, large } as const;
export type ShippedPart = keyof typeof PARTS;

export async function benchProxyShipped(
  parts: ShippedPart[] = Object.keys(PARTS) as ShippedPart[],
): Promise<string> {
  const load = os.loadavg();
  const db = await createTestDatabase('shipped');
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'berth-bench-shipped-'));
  // BENCH_PROXY_BASELINE_TREE: another checkout (e.g. main before a change) started the same way, as
  // one more path of the core part, so a change is measured against its baseline in the same run.
  const baseTree = process.env.BENCH_PROXY_BASELINE_TREE;
  const baseDb = baseTree ? await createTestDatabase('shipped_base') : undefined;
  const baseDir = baseTree ? mkdtempSync(path.join(os.tmpdir(), 'berth-bench-shipped-base-')) : undefined;
  let shipped: Shipped | undefined;
  let base: Shipped | undefined;
  let lean: Lean | undefined;
  try {
    // BENCH_PROXY_TREE: the checkout Berth runs from (default: this one).
    shipped = await startShipped(db.url, dataDir, process.env.BENCH_PROXY_TREE ?? root);
    if (baseTree) base = await startShipped(baseDb!.url, baseDir!, baseTree);
    lean = await startLean(shipped.engine, await freePort());
    const ctx: Ctx = { shipped, lean, ...(base ? { base, baseTree: baseTree! } : {}) };
    const md: string[] = [
      `### Result (${new Date().toISOString().slice(0, 10)}, ${machine()}, load average at start ${load.map((x) => x.toFixed(2)).join(' / ')})`,
      '',
      'Berth as shipped: `npm start` (apps/api/src/start.mjs), local mode, PostgreSQL, LOG_LEVEL=warn, the endpoint’s engine run by the local runtime (engine simulator, TTFT 0, ITL 0). Lean proxy: ../shared/bench/bare-proxy.mjs (node:http + an undici Pool), in front of the same engine.',
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
    await lean?.stop();
    await stopShipped(shipped);
    await stopShipped(base);
    await db.drop();
    await baseDb?.drop();
    rmSync(dataDir, { recursive: true, force: true });
    if (baseDir) rmSync(baseDir, { recursive: true, force: true });
  }
}
