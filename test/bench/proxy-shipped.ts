// `npm run bench proxy-shipped`: the proxy's overhead as a user runs Berth, not through a harness.
// Berth is `npm start`'s entry point (apps/api/src/main.ts) in its own process with default settings
// except what a local-mode user sets: BERTH_RUNTIME=local, PostgreSQL (DATABASE_URL), LOG_LEVEL=warn,
// and engines at zero latency (BERTH_LOCAL_ENGINE_ARGS). The endpoint is created through the API and
// served by the local runtime's own supervised engine-simulator process; "direct" is that same engine
// process (its address read from the endpoint's logs), and the baseline is the bare node:http + undici
// proxy of the proxy benchmark, pointed at the same engine; the proxy benchmark's harness (createApp with
// the in-memory runtime) runs as a fourth path, so product-vs-harness differences show in one run. Latency alternates request by request
// across the three; CPU is each proxy process's run time from /proc/<pid>/task/*/schedstat over batches
// rotating across the processes, divided by the batch. All traffic to 127.0.0.1.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { BENCH_ENDPOINT_ID } from '../support/memory-runtime.ts';
import { createTestDatabase } from '../support/postgres.ts';
import {
  ADMIN_TOKEN,
  BENCH_MODEL,
  concurrent,
  CPU_CONCURRENCY,
  f,
  newKey,
  Proxy,
  sequential,
  signed,
  stop,
  target,
  verdict,
  type Target,
} from './proxy.ts';
import { machine, summarize } from './stats.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const LAT_N = env('BENCH_PROXY_REQUESTS', 3000);
const CPU_N = env('BENCH_PROXY_CPU_REQUESTS', 6000);
const ROUNDS = env('BENCH_PROXY_CPU_ROUNDS', 12);
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

function freePort(): Promise<number> {
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

/** `npm start` with a local-mode user's settings; its endpoint up; the engine's own address. */
export async function startShipped(dbUrl: string, dataDir: string, tree = root) {
  const port = await freePort();
  const nodeArgs = process.env.BENCH_PROXY_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const child: ChildProcess = spawn(
    process.execPath,
    [...nodeArgs, '--import', 'tsx', 'apps/api/src/main.ts'],
    {
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
        BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 0 --max-num-seqs 4096',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  try {
    return await provisioned(child, `http://127.0.0.1:${port}`);
  } catch (err) {
    child.kill('SIGKILL'); // nothing of a failed start outlives the benchmark
    throw err;
  }
}

/** Waits for the API, creates the account, key and endpoint, and waits for the endpoint. */
async function provisioned(child: ChildProcess, url: string) {
  await until('Berth listening', 180_000, async () =>
    (await fetch(url + '/healthz')).ok ? true : undefined,
  );
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

export async function benchProxyShipped(): Promise<string> {
  const load = os.loadavg();
  const db = await createTestDatabase('shipped');
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'berth-bench-shipped-'));
  let shipped: Awaited<ReturnType<typeof startShipped>> | undefined;
  let bare: Proxy | undefined;
  let harness: Proxy | undefined;
  // BENCH_PROXY_BASELINE_TREE: another checkout (e.g. main before a change) started the same way, as
  // a fifth path, so a change is measured against its baseline in the same run.
  const baseTree = process.env.BENCH_PROXY_BASELINE_TREE;
  const baseDb = baseTree ? await createTestDatabase('shipped_base') : undefined;
  const baseDir = baseTree ? mkdtempSync(path.join(os.tmpdir(), 'berth-bench-shipped-base-')) : undefined;
  let base: Awaited<ReturnType<typeof startShipped>> | undefined;
  try {
    shipped = await startShipped(db.url, dataDir);
    if (baseTree) base = await startShipped(baseDb!.url, baseDir!, baseTree);
    bare = await Proxy.start('bare');
    await bare.ask({ type: 'addresses', addresses: [shipped.engine] });
    // The proxy benchmark's harness (createApp + the in-memory runtime) on the same engine, so the
    // difference between the product's path and the harness's shows in the same run.
    harness = await Proxy.start('berth', { DATABASE_URL: db.url, LOG_LEVEL: 'warn' }, 'harness');
    const hk = await newKey(harness);
    await harness.ask({ type: 'addresses', addresses: [shipped.engine] });
    await harness.ask({ type: 'endpoint', account: hk.account, phase: 'up' });
    const direct = target('direct', `${shipped.engine}/v1`);
    const viaBare = target('bare', `${bare.url}/api/d/${shipped.id}`);
    const viaBerth = target('berth', `${shipped.url}/api/d/${shipped.id}`, shipped.auth);
    const viaHarness = target('harness', `${harness.url}/api/d/${BENCH_ENDPOINT_ID}`, {
      authorization: `Bearer ${hk.key}`,
    });
    const viaBase = base && target('baseline', `${base.url}/api/d/${base.id}`, base.auth);
    const targets = [direct, viaBare, viaBerth, viaHarness, ...(viaBase ? [viaBase] : [])];
    for (const t of targets) await sequential(t, 500, false, 16); // warm-up: JIT, connections, key cache

    const lat: Record<string, number[]> = { direct: [], bare: [], berth: [], harness: [], baseline: [] };
    for (let i = 0; i < LAT_N; i++)
      for (let k = 0; k < targets.length; k++) {
        const t = targets[(k + i) % targets.length]!;
        lat[t.name]!.push(...(await sequential(t, 1, false, 16)));
      }

    const pids: [Target, number][] = [
      [viaBare, bare.child.pid!],
      [viaBerth, shipped.child.pid!],
      [viaHarness, harness.child.pid!],
      ...(viaBase ? [[viaBase, base!.child.pid!] as [Target, number]] : []),
    ];
    const cpu: Record<string, { us: number; n: number; rounds: number[] }> = {
      bare: { us: 0, n: 0, rounds: [] },
      berth: { us: 0, n: 0, rounds: [] },
      harness: { us: 0, n: 0, rounds: [] },
      baseline: { us: 0, n: 0, rounds: [] },
    };
    for (const [t] of pids) await concurrent(t, 500, CPU_CONCURRENCY, false, 16);
    for (let r = 0; r < ROUNDS; r++)
      for (const [t, pid] of [...pids.slice(r % pids.length), ...pids.slice(0, r % pids.length)]) {
        const before = cpuUs(pid);
        const res = await concurrent(t, CPU_N / ROUNDS, CPU_CONCURRENCY, false, 16);
        const after = cpuUs(pid);
        if (res.ok !== CPU_N / ROUNDS) throw new Error(`${t.name}: ${res.ok} of ${CPU_N / ROUNDS} answered`);
        cpu[t.name]!.us += after - before;
        cpu[t.name]!.n += res.ok;
        cpu[t.name]!.rounds.push((after - before) / res.ok);
      }
    for (const t of targets) await Promise.all([t.single.close(), t.many.close()]);

    const L = {
      direct: summarize(lat.direct!),
      bare: summarize(lat.bare!),
      berth: summarize(lat.berth!),
      harness: summarize(lat.harness!),
    };
    const B = base ? summarize(lat.baseline!) : undefined;
    const per = (name: string) => cpu[name]!.us / cpu[name]!.n;
    const ratio = per('berth') / per('bare');
    // Each round's ratio to the bare proxy's in the same round (the machine's state moves between
    // rounds more than between two adjacent batches): median, and the range.
    const perRound = (name: string) => {
      const r = cpu[name]!.rounds.map((us, i) => us / cpu.bare!.rounds[i]!).sort((a, b) => a - b);
      const mid = r.length >> 1;
      const median = r.length % 2 ? r[mid]! : (r[mid - 1]! + r[mid]!) / 2;
      return `${f(median, 2)}× (${f(r[0]!, 2)}–${f(r[r.length - 1]!, 2)}×)`;
    };
    const added = L.berth.p50 - L.direct.p50;
    const row = (k: 'p50' | 'p99' | 'mean') =>
      `| ${k} | ${f(L.direct[k])} ms | ${f(L.bare[k])} ms | ${f(L.berth[k])} ms | ${f(L.harness[k])} ms | ${signed(L.bare[k] - L.direct[k])} ms | ${signed(L.berth[k] - L.direct[k])} ms | ${signed(L.harness[k] - L.direct[k])} ms |`;
    return [
      `### Result (${new Date().toISOString().slice(0, 10)}, ${machine()}, load average at start ${load.map((x) => x.toFixed(1)).join(' / ')})`,
      '',
      `Berth as shipped: \`npm start\` (apps/api/src/main.ts), local mode, PostgreSQL, LOG_LEVEL=warn, the endpoint's engine run by the local runtime (TTFT 0, ITL 0). ${LAT_N} non-streamed chat completions (16 tokens) per path, one keep-alive connection per path, alternating request by request after a warm-up of 500 per path. CPU: ${CPU_N} requests per proxy, ${CPU_CONCURRENCY} in flight, in ${ROUNDS} rounds of one batch per process (the order rotating); each proxy process's CPU time from /proc/<pid>/task/*/schedstat (ns).`,
      '',
      '| latency | direct | bare undici proxy | Berth (`npm start`) | Berth (harness) | added by bare | added by Berth | added by the harness |',
      '|---|---|---|---|---|---|---|---|',
      row('p50'),
      row('p99'),
      row('mean'),
      '',
      '| CPU per non-streamed request | bare | Berth (`npm start`) | Berth / bare | harness | harness / bare |',
      '|---|---|---|---|---|---|',
      `| µs, all rounds | ${f(per('bare'), 0)} | ${f(per('berth'), 0)} | ${f(ratio, 2)}× | ${f(per('harness'), 0)} | ${f(per('harness') / per('bare'), 2)}× |`,
      `| per round: median (range) of the ratio to the bare proxy's in the same round | | | ${perRound('berth')} | | ${perRound('harness')} |`,
      '',
      ...(B
        ? [
            '',
            `Baseline tree (${baseTree}), the same way, in the same run:`,
            '',
            '| | added p50 | added p99 | added p50 / bare’s | CPU / request | CPU / bare |',
            '|---|---|---|---|---|---|',
            `| this tree | ${signed(L.berth.p50 - L.direct.p50)} ms | ${signed(L.berth.p99 - L.direct.p99)} ms | ${f((L.berth.p50 - L.direct.p50) / (L.bare.p50 - L.direct.p50), 2)}× | ${f(per('berth'), 0)} µs | ${f(ratio, 2)}× |`,
            `| baseline | ${signed(B.p50 - L.direct.p50)} ms | ${signed(B.p99 - L.direct.p99)} ms | ${f((B.p50 - L.direct.p50) / (L.bare.p50 - L.direct.p50), 2)}× | ${f(per('baseline'), 0)} µs | ${f(per('baseline') / per('bare'), 2)}× |`,
            `| per round (median, range) | | | | | this tree ${perRound('berth')}; baseline ${perRound('baseline')} |`,
          ]
        : []),
      '',
      '| target | measured | verdict |',
      '|---|---|---|',
      `| ≤ 0.5 ms added p50 over direct | ${signed(added)} ms (bare: ${signed(L.bare.p50 - L.direct.p50)} ms; ${f(added / (L.bare.p50 - L.direct.p50), 2)}× the bare hop’s) | ${verdict(added <= 0.5, added - 0.5, 'ms')} |`,
      `| CPU ≤ 1.3× the bare proxy's per request | ${f(ratio, 2)}× | ${verdict(ratio <= 1.3, ratio - 1.3, '×')} |`,
    ].join('\n');
  } finally {
    await bare?.stop();
    await harness?.stop();
    if (shipped) {
      const exited = new Promise((r) => shipped!.child.once('exit', r));
      shipped.child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
      await stop(shipped.child);
    }
    if (base) {
      const exited = new Promise((r) => base!.child.once('exit', r));
      base.child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
      await stop(base.child);
    }
    await db.drop();
    await baseDb?.drop();
    rmSync(dataDir, { recursive: true, force: true });
    if (baseDir) rmSync(baseDir, { recursive: true, force: true });
  }
}
