// One hot account (issue 32), on real PostgreSQL with the production defaults (flush every 1 s, 30 s
// leases, 5 s settle wait): reserve + settle throughput and database transactions per call; how long
// a 402 takes to decide for an account that cannot pay; 1,000 concurrent spenders on a balance that
// covers exactly N calls (on one replica and on two); and a replica killed with SIGKILL mid-run —
// what it had settled but not written is lost (under-charged, at most a flush interval's worth),
// nothing is charged twice, the ledger reconciles.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { WalletConfig } from '../../apps/api/src/billing/wallet.ts';
import { billingBed, type BillingBed, type WalletReplica } from '../support/billing-replica.ts';
import { sql, transactionCount } from '../support/postgres.ts';
import { machine, summarize } from './stats.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const PRODUCTION: WalletConfig = {
  flushIntervalMs: 1_000,
  leaseTtlMs: 30_000,
  freeQueries: 0,
  reclaimWaitMs: 500,
  settleWaitMs: 5_000,
};
const usage = { keyId: 'key_bench', model: 'bench', promptTokens: 100, completionTokens: 50 };
const CALLS = Number(process.env.BENCH_HOT_CALLS ?? 300_000);

/** Reserve + settle as fast as `concurrency` callers go: calls per second and transactions per call. */
async function throughput(bed: BillingBed, concurrency: number) {
  const account = await bed.account(1_000_000_000_000n);
  const w = await bed.replica(PRODUCTION);
  const warm = await w.reserve({ accountId: account, amount: 2_000n });
  if (warm.ok) warm.hold.release();
  const before = await transactionCount(bed.url);
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next++ < CALLS) {
        const r = await w.reserve({ accountId: account, amount: 2_000n });
        if (!r.ok) throw new Error('refused');
        r.hold.settle(1_000n, usage);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const after = await transactionCount(bed.url); // waits 1.5 s: the last flush is in
  const [charged] = await sql<{ s: string }>(
    bed.url,
    `SELECT COALESCE(-sum(amount), 0)::text AS s FROM ledger_entries WHERE account_id = $1 AND kind = 'charge'`,
    [account],
  );
  await w.close();
  return {
    calls: CALLS,
    seconds,
    perSecond: CALLS / seconds,
    xacts: after - before - 1,
    charged: BigInt(charged!.s),
  };
}

/** How long `reserve` takes to answer 402 for an account that cannot pay. */
async function refusalLatency(bed: BillingBed) {
  const account = await bed.account(1_000n); // paid, and too little for a call
  const w = await bed.replica(PRODUCTION);
  const samples: number[] = [];
  for (let i = 0; i < 100_000; i++) {
    const t = performance.now();
    const r = await w.reserve({ accountId: account, amount: 2_000n });
    samples.push(performance.now() - t);
    if (r.ok) throw new Error('not refused');
  }
  await w.close();
  return { ...summarize(samples), max: Math.max(...samples) };
}

/** `spenders` concurrent callers (over `replicas`) on a balance of exactly `n` calls; answered calls. */
async function exactlyN(bed: BillingBed, n: number, spenders: number, replicaCount: number) {
  const bound = 1_000n;
  const account = await bed.account(bound * BigInt(n));
  const replicas: WalletReplica[] = [];
  for (let i = 0; i < replicaCount; i++) replicas.push(await bed.replica(PRODUCTION));
  let answered = 0;
  let refused = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: spenders }, async (_, i) => {
      const w = replicas[i % replicaCount]!;
      for (;;) {
        const r = await w.reserve({ accountId: account, amount: bound });
        if (!r.ok) return void refused++;
        await new Promise((resolve) => setTimeout(resolve, i % 3));
        r.hold.settle(bound, usage);
        answered++;
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  for (const w of replicas) await w.close();
  const [row] = await sql<{ balance: string }>(
    bed.url,
    'SELECT balance::text FROM billing_accounts WHERE account_id = $1',
    [account],
  );
  return { n, answered, refused, seconds, balance: BigInt(row!.balance) };
}

/** Two replicas spend; one (its own process) is killed with SIGKILL mid-run. */
async function killed(bed: BillingBed) {
  const account = await bed.account(1_000_000_000_000n);
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', 'test/support/billing-spender.ts', 'stream', bed.url, account, '50', '1000'],
    { cwd: root, stdio: ['pipe', 'pipe', 'inherit'] },
  );
  const lines = createInterface({ input: child.stdout! });
  const ready = await new Promise<string>((r) => lines.once('line', r));
  const replica = ready.split(' ')[1]!;
  let last = { calls: 0, charged: 0n, at: 0 };
  let went = 0;
  lines.on('line', (l) => {
    const [calls, charged] = l.split(' ');
    last = { calls: Number(calls), charged: BigInt(charged!), at: performance.now() };
  });
  const here = await bed.replica({ ...PRODUCTION, leaseTtlMs: 5_000 });
  let mine = 0n;
  let refused = 0;
  let stop = false;
  child.stdin!.write('go\n');
  went = performance.now();
  const spending = Promise.all(
    Array.from({ length: 50 }, async () => {
      while (!stop) {
        const r = await here.reserve({ accountId: account, amount: 1_000n });
        if (!r.ok) {
          refused++;
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 1));
        mine += r.hold.settle(1_000n, usage);
      }
    }),
  );
  await new Promise((r) => setTimeout(r, 3_300));
  child.kill('SIGKILL');
  const killedAt = performance.now();
  await new Promise((r) => child.once('exit', r));
  const reported = last;
  await new Promise((r) => setTimeout(r, 2_000));
  stop = true;
  await spending;
  await here.close();
  const charges = async (prefix: string) => {
    const [row] = await sql<{ s: string; n: number }>(
      bed.url,
      `SELECT COALESCE(-sum(amount), 0)::text AS s, count(*)::int AS n FROM ledger_entries
       WHERE account_id = $1 AND kind = 'charge' AND idempotency_key LIKE $2`,
      [account, `charge:${prefix}:%`],
    );
    return { amount: BigInt(row!.s), entries: row!.n };
  };
  const dead = await charges(replica);
  const alive = await charges(here.replica);
  // The dead replica's lease comes back after its ttl (5 s here).
  await new Promise((r) => setTimeout(r, 6_000));
  const settle = await bed.replica(PRODUCTION);
  const probe = await settle.reserve({ accountId: account, amount: 1n });
  if (probe.ok) probe.hold.release();
  await settle.close();
  const reconciliation = await bed.repo.reconcile();
  const [lease] = await sql<{ leased: string }>(
    bed.url,
    'SELECT leased::text FROM billing_accounts WHERE account_id = $1',
    [account],
  );
  // What it settled by the kill: at least its last report, at most that plus its rate since.
  const rate = Number(reported.charged) / (reported.at - went);
  const settledAtMost = reported.charged + BigInt(Math.ceil(rate * (killedAt - reported.at)));
  return {
    reportedBeforeKill: reported,
    reportAge: killedAt - reported.at,
    settledAtMost,
    refused,
    perFlush: BigInt(Math.round(rate * 1000)),
    dead,
    alive,
    mine,
    mismatches: reconciliation.mismatches.length,
    leasedAfterTtl: BigInt(lease!.leased),
  };
}

export async function benchBillingHot(): Promise<string> {
  const bed = await billingBed('bench_hot');
  try {
    for (const t of ['billing_accounts', 'billing_leases', 'ledger_entries', 'metered_usage'])
      await sql(bed.url, `ALTER TABLE "${t}" SET (autovacuum_enabled = false)`);
    const tp = await throughput(bed, 100);
    const refusal = await refusalLatency(bed);
    const n1 = await exactlyN(bed, 20_000, 1_000, 1);
    const n2 = await exactlyN(bed, 20_000, 1_000, 2);
    const k = await killed(bed);
    const load = (await import('node:os'))
      .loadavg()
      .map((x) => x.toFixed(1))
      .join(' / ');
    const money = (v: bigint) => `${v.toLocaleString('en')} µ`;
    return [
      `### One hot account (${new Date().toISOString().slice(0, 10)}, ${machine()}, load ${load})`,
      '',
      '| what | measured | target |',
      '|---|---|---|',
      `| reserve + settle, one replica, 100 concurrent callers | **${Math.round(tp.perSecond).toLocaleString('en')} calls/s** (${tp.calls.toLocaleString('en')} calls in ${tp.seconds.toFixed(2)} s) | ≥ 5,000 calls/s |`,
      `| database transactions per call | **1 per ${Math.round(tp.calls / Math.max(1, tp.xacts)).toLocaleString('en')} calls** (${tp.xacts} transactions; charged ${money(tp.charged)} = ${tp.calls.toLocaleString('en')} × 1,000 µ) | ≤ 1 per 50 |`,
      `| 402 decision, account that cannot pay (100,000 calls) | p50 ${(refusal.p50 * 1000).toFixed(1)} µs, **p99 ${(refusal.p99 * 1000).toFixed(1)} µs**, max ${refusal.max.toFixed(2)} ms (the first: a lease write) | p99 ≤ 0.2 ms |`,
      `| 1,000 spenders, balance of exactly ${n1.n.toLocaleString('en')} calls, one replica | **${n1.answered.toLocaleString('en')} answered**, ${n1.refused} refused, balance left ${n1.balance} (${n1.seconds.toFixed(1)} s) | exactly N |`,
      `| the same over two replicas | **${n2.answered.toLocaleString('en')} answered**, ${n2.refused} refused, balance left ${n2.balance} (${n2.seconds.toFixed(1)} s) | exactly N |`,
      `| a replica SIGKILLed after 3.3 s of spending (50 callers each side) | settled by it: between ${money(k.reportedBeforeKill.charged)} (its last report, ${k.reportAge.toFixed(0)} ms before the kill) and ${money(k.settledAtMost)}; **charged for it: ${money(k.dead.amount)}** (${k.dead.entries} batches), so lost ≤ ${money(k.settledAtMost - k.dead.amount)}, against ${money(k.perFlush)} settled per flush interval at its rate | under-charged by at most one flush interval (1 s) of its calls, never over-charged |`,
      `| the replica that lived | settled ${money(k.mine)}, **charged ${money(k.alive.amount)}**; refused ${k.refused} calls | equal; 0 |`,
      `| afterwards | reconciliation mismatches: **${k.mismatches}**; leased after the dead lease's ttl: ${k.leasedAfterTtl} | 0; 0 |`,
    ].join('\n');
  } finally {
    await bed.close();
  }
}
