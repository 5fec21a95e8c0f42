// `npm run bench elastic`: Elastic inference's overhead as a user runs Berth (issues 12 and 13).
// Berth is `npm start`'s entry point in its own process, local mode, PostgreSQL (proxy-shipped.ts's
// startShipped: the platform account's endpoint is run by the local runtime's own engine simulator,
// TTFT 0, ITL 0). Two catalog models have that endpoint as their only backend: `bench-paid`, priced,
// called by a credited account (billing on: every call reserves its upper bound in the wallet and
// settles the exact cost), and `bench-free`, priced 0 (billing off: no reservation, no charge; usage
// is still metered, as the dedicated proxy meters it). Paths, in the same run:
//   direct    — the engine itself;
//   lean      — the lean baseline proxy (../shared/bench/bare-proxy.mjs, ./lean.ts) in front of it;
//   dedicated — `/api/d/<id>/chat/completions` with the platform account's key;
//   elastic   — `/api/chat/completions`, model `bench-paid` (billing on);
//   free      — `/api/chat/completions`, model `bench-free` (billing off).
// Latency and first SSE byte alternate request by request across the paths (one keep-alive connection
// each); CPU is each proxy process's run time (/proc/<pid>/task/*/schedstat) over batches rotating
// across the proxied paths, divided by the requests; database transactions are PostgreSQL's own counter
// (pg_stat_database xact_commit + xact_rollback of the API's database) over a phase of load on one
// path, read after the API's backends have published their counters (they do at most every 10 s
// while busy, so each phase ends with an 11 s wait that is counted in every phase alike).
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createTestDatabase, transactionCount } from '../support/postgres.ts';
import {
  ADMIN_TOKEN,
  concurrent,
  CPU_CONCURRENCY,
  f,
  newKey,
  sequential,
  signed,
  target,
  type Target,
} from './proxy.ts';
import { startLean, type Lean } from './lean.ts';
import { cpuUs, freePort, pass, startShipped, stopShipped } from './proxy-shipped.ts';
import { machine, summarize } from './stats.ts';

const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const LAT_N = env('BENCH_ELASTIC_REQUESTS', 500);
const TTFB_N = env('BENCH_ELASTIC_STREAMS', 250);
const CPU_N = env('BENCH_ELASTIC_CPU_REQUESTS', 2400);
const DB_S = env('BENCH_ELASTIC_DB_SECONDS', 6);
const ROUNDS = 6;
const TOKENS = 16;

const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };

async function putModel(url: string, name: string, endpoint: string, pricing: Record<string, string>) {
  const res = await fetch(`${url}/admin/models/${name}`, {
    method: 'PUT',
    headers: admin,
    body: JSON.stringify({ kind: 'chat', backends: [{ endpoint }], pricing }),
  });
  if (res.status !== 201) throw new Error(`catalog ${name}: ${res.status} ${await res.text()}`);
}

/** Concurrent requests on one path for `seconds`; how many were answered. */
async function load(t: Parameters<typeof concurrent>[0], seconds: number): Promise<number> {
  let ok = 0;
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const r = await concurrent(t, 200, CPU_CONCURRENCY, false, TOKENS);
    if (r.ok !== 200) throw new Error(`${t.name}: ${r.ok} of 200 answered`);
    ok += r.ok;
  }
  return ok;
}

export async function benchElastic(): Promise<string> {
  const load0 = os.loadavg();
  const db = await createTestDatabase('elastic');
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'berth-bench-elastic-'));
  let shipped: Awaited<ReturnType<typeof startShipped>> | undefined;
  let leanProxy: Lean | undefined;
  try {
    // BENCH_PROXY_TREE: the checkout Berth runs from (default: this one), as in proxy-shipped.
    shipped = await startShipped(db.url, dataDir, process.env.BENCH_PROXY_TREE);
    leanProxy = await startLean(shipped.engine, await freePort());
    await putModel(shipped.url, 'bench-paid', shipped.id, { inputPerMTok: '0.10', outputPerMTok: '0.30' });
    await putModel(shipped.url, 'bench-free', shipped.id, { inputPerMTok: '0', outputPerMTok: '0' });
    const user = await newKey(shipped);
    const credit = await fetch(`${shipped.url}/admin/accounts/${user.account}/credits`, {
      method: 'POST',
      headers: { ...admin, 'idempotency-key': randomUUID() },
      body: JSON.stringify({ amount: '1000.00', reference: 'bench' }),
    });
    if (credit.status !== 201) throw new Error(`credit: ${credit.status} ${await credit.text()}`);
    const userAuth = { authorization: `Bearer ${user.key}` };

    const direct = target('direct', `${shipped.engine}/v1`);
    const lean = target('lean', `${leanProxy.url}/v1`);
    const dedicated = target('dedicated', `${shipped.url}/api/d/${shipped.id}`, shipped.auth);
    const elastic = target('elastic', `${shipped.url}/api`, userAuth, 'bench-paid');
    const free = target('free', `${shipped.url}/api`, userAuth, 'bench-free');
    const targets = [direct, lean, dedicated, elastic, free];
    for (const t of targets) {
      await sequential(t, 300, false, TOKENS); // warm-up: JIT, connections, key cache, the wallet's lease
      await sequential(t, 50, true, TOKENS);
    }

    const lat: Record<string, number[]> = { direct: [], lean: [], dedicated: [], elastic: [], free: [] };
    const ttfb: Record<string, number[]> = { direct: [], lean: [], dedicated: [], elastic: [], free: [] };
    for (let i = 0; i < Math.max(LAT_N, TTFB_N); i++)
      for (let k = 0; k < targets.length; k++) {
        const t = targets[(k + i) % targets.length]!;
        if (i < LAT_N) lat[t.name]!.push(...(await sequential(t, 1, false, TOKENS)));
        if (i < TTFB_N) ttfb[t.name]!.push(...(await sequential(t, 1, true, TOKENS)));
      }

    const pid = shipped.child.pid!;
    const proxied: [Target, number][] = [
      [lean, leanProxy.child.pid!],
      [dedicated, pid],
      [elastic, pid],
      [free, pid],
    ];
    const cpu: Record<string, { us: number; n: number }> = {
      lean: { us: 0, n: 0 },
      dedicated: { us: 0, n: 0 },
      elastic: { us: 0, n: 0 },
      free: { us: 0, n: 0 },
    };
    const batch = Math.round(CPU_N / ROUNDS);
    for (let r = 0; r < ROUNDS; r++)
      for (const [t, pid] of [...proxied.slice(r % 4), ...proxied.slice(0, r % 4)]) {
        const before = cpuUs(pid);
        const res = await concurrent(t, batch, CPU_CONCURRENCY, false, TOKENS);
        const after = cpuUs(pid);
        if (res.ok !== batch) throw new Error(`${t.name}: ${res.ok} of ${batch} answered`);
        cpu[t.name]!.us += after - before;
        cpu[t.name]!.n += res.ok;
      }

    // Database transactions per request: one phase per path, each followed by the same wait.
    const xact: Record<string, { tx: number; n: number }> = {};
    await new Promise((r) => setTimeout(r, 9_500)); // the CPU batches' counters published
    let counter = await transactionCount(db.url);
    // The last phase is billing on again, 2 × as long: each phase starts after the same idle wait
    // (the wallet forgets an account idle for 10 s and sizes its first lease small again), so the
    // difference between the two billing-on phases, less the idle phase's background rate over the
    // extra seconds, is the steady state, free of the start-up and of the wait.
    const phases = [
      { key: 'idle', t: undefined, s: DB_S },
      { key: 'dedicated', t: dedicated, s: DB_S },
      { key: 'free', t: free, s: DB_S },
      { key: 'elastic', t: elastic, s: DB_S },
      { key: 'elastic-long', t: elastic, s: 2 * DB_S },
    ];
    for (const { key, t, s } of phases) {
      const n = t ? await load(t, s) : (await new Promise((r) => setTimeout(r, s * 1000)), 0);
      await new Promise((r) => setTimeout(r, 9_500)); // + 1.5 s in transactionCount
      const now = await transactionCount(db.url);
      xact[key] = { tx: now - counter - 2, n }; // − the previous count's own two statements
      counter = now;
    }
    for (const t of targets) await Promise.all([t.single.close(), t.many.close()]);

    const L = Object.fromEntries(Object.entries(lat).map(([k, v]) => [k, summarize(v)]));
    const T = Object.fromEntries(Object.entries(ttfb).map(([k, v]) => [k, summarize(v)]));
    const per = (name: string) => cpu[name]!.us / cpu[name]!.n;
    const perTx = (name: string) => xact[name]!.tx / xact[name]!.n;
    const onOff = per('elastic') / per('free');
    const vsDedicated = per('elastic') / per('dedicated');
    const added = L.elastic!.p50 - L.direct!.p50;
    const leanAdded = L.lean!.p50 - L.direct!.p50;
    const row = (k: 'p50' | 'p99') =>
      `| ${k} | ${f(L.direct![k])} ms | ${f(L.lean![k])} ms (${signed(L.lean![k] - L.direct![k])}) | ${f(L.dedicated![k])} ms (${signed(L.dedicated![k] - L.direct![k])}) | ${f(L.elastic![k])} ms (${signed(L.elastic![k] - L.direct![k])}) | ${f(L.free![k])} ms (${signed(L.free![k] - L.direct![k])}) |`;
    const ttfbRow = (k: 'p50' | 'p99') =>
      `| first SSE byte ${k} | ${f(T.direct![k])} ms | ${f(T.lean![k])} ms (${signed(T.lean![k] - T.direct![k])}) | ${f(T.dedicated![k])} ms (${signed(T.dedicated![k] - T.direct![k])}) | ${f(T.elastic![k])} ms (${signed(T.elastic![k] - T.direct![k])}) | ${f(T.free![k])} ms (${signed(T.free![k] - T.direct![k])}) |`;
    const idle = xact.idle!.tx;
    const bgPerS = idle / (DB_S + 11);
    const steady =
      (xact['elastic-long']!.tx - xact.elastic!.tx - bgPerS * DB_S) /
      (xact['elastic-long']!.n - xact.elastic!.n);
    const netTx = (name: string) => Math.max(0, xact[name]!.tx - idle) / xact[name]!.n;
    const txRow = (name: string, label: string) =>
      `| ${label} | ${xact[name]!.n} | ${xact[name]!.tx} | ${f(perTx(name), 4)} | ${f(netTx(name), 4)} |`;
    return [
      `### Result (${new Date().toISOString().slice(0, 10)}, ${machine()}, load average at start ${load0.map((x) => x.toFixed(2)).join(' / ')})`,
      '',
      `Berth as shipped (\`npm start\`, local mode, PostgreSQL, LOG_LEVEL=warn); one platform endpoint served by the local runtime's engine (TTFT 0, ITL 0, ${TOKENS} tokens); \`bench-paid\` (0.10 / 0.30 per million tokens, a credited account: billing on) and \`bench-free\` (priced 0: billing off) both have that endpoint as their backend. Latency: ${LAT_N} non-streamed chat completions per path; first SSE byte: ${TTFB_N} streamed ones per path; one keep-alive connection per path, alternating request by request. Lean: ../shared/bench/bare-proxy.mjs in front of the same engine. CPU: ${batch * ROUNDS} requests per path, ${CPU_CONCURRENCY} in flight, ${ROUNDS} batches rotating across the paths; each process's /proc/<pid>/task/*/schedstat (ns). Transactions: an idle phase, then ${DB_S} s of load (${CPU_CONCURRENCY} in flight) per path and ${2 * DB_S} s with billing on, each followed by 11 s idle, pg_stat_database of the API's database (background work of the API — job queue, leases, GPU metering — falls into every phase alike).`,
      '',
      '| latency (added over direct) | direct | lean proxy | `/api/d/<id>` (dedicated) | Elastic, billing on | Elastic, billing off |',
      '|---|---|---|---|---|---|',
      row('p50'),
      row('p99'),
      ttfbRow('p50'),
      ttfbRow('p99'),
      '',
      '| CPU per non-streamed request | lean proxy | dedicated | Elastic, billing on | Elastic, billing off | on / off | Elastic (on) / dedicated |',
      '|---|---|---|---|---|---|---|',
      `| µs | ${f(per('lean'), 0)} | ${f(per('dedicated'), 0)} (${f(per('dedicated') / per('lean'), 2)}× lean) | ${f(per('elastic'), 0)} | ${f(per('free'), 0)} | ${f(onOff, 2)}× | ${f(vsDedicated, 2)}× |`,
      '',
      '| phase | requests | database transactions (whole phase + 11 s) | per request | per request, less the idle phase |',
      '|---|---|---|---|---|',
      `| idle (background) | 0 | ${idle} | – | – |`,
      txRow('dedicated', 'dedicated'),
      txRow('free', 'Elastic, billing off'),
      txRow('elastic', 'Elastic, billing on'),
      txRow('elastic-long', `Elastic, billing on, ${2 * DB_S} s`),
      '',
      `Steady state, billing on: (transactions of the ${2 * DB_S} s phase − of the ${DB_S} s phase − ${f(bgPerS, 1)} background transactions a second × ${DB_S} s) / (requests of the ${2 * DB_S} s phase − of the ${DB_S} s phase) = **${f(steady, 4)}** transactions per request.`,
      '',
      '| target | measured | verdict |',
      '|---|---|---|',
      `| Elastic CPU with billing on ≤ 1.1× billing off | ${f(onOff, 2)}× | ${pass(onOff <= 1.1, onOff - 1.1, '×')} |`,
      `| Elastic CPU ≤ 1.1× the dedicated proxy's | ${f(vsDedicated, 2)}× | ${pass(vsDedicated <= 1.1, vsDedicated - 1.1, '×')} |`,
      `| < 0.05 database transactions per request at steady state, billing on | ${f(steady, 4)} (whole ${DB_S} s phase: ${f(perTx('elastic'), 4)} with background, ${f(netTx('elastic'), 4)} without) | ${pass(steady < 0.05, steady - 0.05, '')} |`,
      `| added p50 (Elastic, billing on) ≤ the lean proxy's + 0.15 ms | ${signed(added)} ms vs lean ${signed(leanAdded)} ms | ${pass(added - leanAdded <= 0.15, added - leanAdded - 0.15, 'ms')} |`,
    ].join('\n');
  } finally {
    await leanProxy?.stop();
    await stopShipped(shipped);
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
