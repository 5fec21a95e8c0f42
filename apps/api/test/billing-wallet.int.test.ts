// The hot path on real PostgreSQL: reservations against leases, batched charges, free queries,
// several replicas (wallets with their own connections), and a second replica in its own process.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { openDatabase, openMigratedDatabase, type Database } from '@berth/db';
import type pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callCost, parsePricing } from '../src/platform/money.ts';
import { postgresBillingEvents, type BillingEvents } from '../src/billing/notifications.ts';
import { billingRepository, type BillingRepository } from '../src/billing/repository.ts';
import { createWallet, type Wallet, type WalletConfig } from '../src/billing/wallet.ts';
import { createTestDatabase, type TestDatabase, sql } from '@berth/test/support/postgres';
import { eventually } from '@berth/test/support/eventually';
import { runSpenders, TEST_WALLET_CONFIG, type SpendResult } from '@berth/test/support/billing-spender';
import { billingAccount } from '@berth/test/support/billing-replica';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const logger = pino({ level: 'silent' });

let tdb: TestDatabase;
let main: Database;
let repo: BillingRepository;
const cleanup: (() => Promise<void>)[] = [];

beforeAll(async () => {
  tdb = await createTestDatabase('wallet');
  main = await openMigratedDatabase({ kind: 'postgres', url: tdb.url, poolSize: 4 });
  repo = billingRepository(main.prisma);
});
afterAll(async () => {
  for (const fn of cleanup.reverse()) await fn().catch(() => {});
  await main?.close();
  await tdb?.drop();
});

const query = <T extends pg.QueryResultRow>(text: string, values: unknown[] = []) =>
  sql<T>(tdb.url, text, values);

const newAccount = (credit?: bigint) => billingAccount(tdb.url, repo, credit);

/** A replica: its own connections, notification listener and wallet. */
async function replica(
  config: Partial<WalletConfig> = {},
  spy?: { syncs: number; freeTakes: number },
): Promise<Wallet> {
  const db = await openDatabase({ kind: 'postgres', url: tdb.url, poolSize: 4 });
  const events: BillingEvents = await postgresBillingEvents({ url: tdb.url, logger });
  const real = billingRepository(db.prisma);
  const counted: BillingRepository = spy
    ? {
        ...real,
        sync: (r) => (spy.syncs++, real.sync(r)),
        takeFreeQuery: (a, l) => (spy.freeTakes++, real.takeFreeQuery(a, l)),
      }
    : real;
  const wallet = createWallet({
    repo: counted,
    events,
    logger,
    config: { ...TEST_WALLET_CONFIG, ...config },
  });
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await wallet.close();
    await events.close();
    await db.close();
  };
  cleanup.push(close);
  return { ...wallet, close };
}

async function account(id: string) {
  const [row] = await query<{ balance: string; leased: string; paid: boolean; free_queries_used: number }>(
    'SELECT balance::text, leased::text, paid, free_queries_used FROM billing_accounts WHERE account_id = $1',
    [id],
  );
  return {
    balance: BigInt(row!.balance),
    leased: BigInt(row!.leased),
    paid: row!.paid,
    freeUsed: row!.free_queries_used,
  };
}

async function ledgerSum(id: string): Promise<bigint> {
  const [row] = await query<{ s: string }>(
    'SELECT COALESCE(SUM(amount), 0)::text AS s FROM ledger_entries WHERE account_id = $1',
    [id],
  );
  return BigInt(row!.s);
}

const usage = { keyId: 'key_test', model: 'test-model', promptTokens: 10, completionTokens: 20 };

describe('reservations against a lease', () => {
  it('costs no database round trip once the lease is taken, and writes one charge per flush', async () => {
    const id = await newAccount(10_000_000n); // $10
    const spy = { syncs: 0, freeTakes: 0 };
    const w = await replica({ flushIntervalMs: 60_000 }, spy); // no timer flush during the test
    // The first lease covers at least 64 calls of the size reserved.
    for (let i = 0; i < 64; i++) {
      const r = await w.reserve({ accountId: id, amount: 1_000n });
      if (!r.ok) throw new Error('refused');
      r.hold.settle(600n, usage);
    }
    expect(spy.syncs).toBe(1); // 64 reservations, one write (the lease)
    await w.flush();
    expect(spy.syncs).toBe(2);
    const charges = await query<{ amount: string; reference: string }>(
      `SELECT amount::text, reference FROM ledger_entries WHERE account_id = $1 AND kind = 'charge'`,
      [id],
    );
    expect(charges).toEqual([{ amount: String(-64n * 600n), reference: '64 calls' }]);
    expect(await account(id)).toMatchObject({ balance: 10_000_000n - 38_400n });
    const [u] = await query<{
      requests: number;
      prompt_tokens: string;
      completion_tokens: string;
      cost: string;
    }>(
      // Usage is kept per minute: calls that straddle a minute's end are in two rows.
      `SELECT sum(requests)::int AS requests, sum(prompt_tokens)::text AS prompt_tokens,
              sum(completion_tokens)::text AS completion_tokens, sum(cost)::text AS cost
         FROM metered_usage WHERE account_id = $1`,
      [id],
    );
    expect(u).toEqual({ requests: 64, prompt_tokens: '640', completion_tokens: '1280', cost: '38400' });
    await w.close();
    // Closing gives the lease back: nothing is lent any more, and the ledger explains the balance.
    expect(await account(id)).toMatchObject({ balance: 10_000_000n - 38_400n, leased: 0n });
    expect(await ledgerSum(id)).toBe(10_000_000n - 38_400n);
  });

  it('an account that went idle and comes back is charged again (its usage is not taken for a replay)', async () => {
    const id = await newAccount(1_000_000n);
    const w = await replica(); // flush every 200 ms; idle after max(ttl / 3, 2 flushes) ≈ 1.7 s
    const spend = async () => {
      const r = await w.reserve({ accountId: id, amount: 1_000n });
      if (!r.ok) throw new Error('refused');
      r.hold.settle(300n, usage);
      await w.flush();
    };
    await spend();
    // Idle: the lease goes back, then the replica forgets the account.
    await eventually(
      async () =>
        expect(
          await query('SELECT 1 FROM billing_leases WHERE account_id = $1 AND amount > 0', [id]),
        ).toEqual([]),
      { timeout: 10_000, interval: 100 },
    );
    await new Promise((r) => setTimeout(r, 600));
    await spend();
    await spend();
    const [u] = await query<{ requests: number; cost: string }>(
      'SELECT sum(requests)::int AS requests, sum(cost)::text AS cost FROM metered_usage WHERE account_id = $1',
      [id],
    );
    expect(u).toEqual({ requests: 3, cost: '900' });
    expect(await account(id)).toMatchObject({ balance: 1_000_000n - 900n });
    expect(await ledgerSum(id)).toBe(1_000_000n - 900n);
  });

  it('a released reservation charges nothing', async () => {
    const id = await newAccount(1_000_000n);
    const w = await replica();
    const r = await w.reserve({ accountId: id, amount: 500_000n });
    if (!r.ok) throw new Error('refused');
    r.hold.release();
    r.hold.settle(400_000n, usage); // after release: ignored
    await w.close();
    expect(await account(id)).toMatchObject({ balance: 1_000_000n, leased: 0n });
    expect(
      await query(`SELECT 1 FROM ledger_entries WHERE account_id = $1 AND kind = 'charge'`, [id]),
    ).toEqual([]);
  });

  it('a call cut mid-stream is charged for the tokens it generated', async () => {
    const pricing = parsePricing({ inputPerMTok: '0.50', outputPerMTok: '1.50' })!;
    const id = await newAccount(1_000_000n);
    const w = await replica();
    const r = await w.reserve({ accountId: id, amount: callCost(pricing, 200, 4096) });
    if (!r.ok) throw new Error('refused');
    // The client went away after 37 of up to 4096 tokens: the proxy settles what was generated.
    const charged = r.hold.settle(callCost(pricing, 120, 37), {
      ...usage,
      promptTokens: 120,
      completionTokens: 37,
    });
    expect(charged).toBe(116n); // 120 × 0.5 + 37 × 1.5 = 115.5 µ$ → 116
    await w.close();
    expect(await account(id)).toMatchObject({ balance: 1_000_000n - 116n });
    const [u] = await query<{ completion_tokens: string; cost: string }>(
      'SELECT completion_tokens::text, cost::text FROM metered_usage WHERE account_id = $1',
      [id],
    );
    expect(u).toEqual({ completion_tokens: '37', cost: '116' });
  });

  it('refuses what the balance cannot cover, and an unknown account', async () => {
    const id = await newAccount(999n);
    const w = await replica();
    expect((await w.reserve({ accountId: id, amount: 1_000n })).ok).toBe(false);
    expect((await w.reserve({ accountId: 'acct_nobody', amount: 1n })).ok).toBe(false);
    const ok = await w.reserve({ accountId: id, amount: 999n });
    expect(ok.ok).toBe(true);
    await w.close();
  });

  it('sees a credit at once after answering 402 (NOTIFY available)', async () => {
    const id = await newAccount();
    const w = await replica();
    expect((await w.reserve({ accountId: id, amount: 1_000n })).ok).toBe(false);
    await repo.post({
      accountId: id,
      kind: 'credit',
      amount: 5_000n,
      idempotencyKey: `request:late-${id}`,
      reference: null,
    });
    await eventually(async () => (await w.reserve({ accountId: id, amount: 1_000n })).ok, {
      timeout: 5_000,
      interval: 50,
    });
    await w.close();
  });

  it('a credit posted through this replica is seen by its next reservation, without waiting for its NOTIFY', async () => {
    // The admin credit route tells its own wallet (balanceGrew) before answering 201; the NOTIFY it
    // also sends may arrive later under load — here it never does.
    const id = await newAccount();
    const silent: BillingEvents = { onMessage: () => {}, onReset: () => {}, close: async () => {} };
    // A clock that stands still: the 402 found a moment ago stays trusted however slow this machine is.
    const w = createWallet({
      repo,
      events: silent,
      logger,
      config: TEST_WALLET_CONFIG,
      monotonic: () => 1e6,
    });
    cleanup.push(() => w.close());
    expect((await w.reserve({ accountId: id, amount: 1_000n })).ok).toBe(false);
    await repo.post({
      accountId: id,
      kind: 'credit',
      amount: 5_000n,
      idempotencyKey: `request:local-${id}`,
      reference: null,
    });
    // Without the word, the 402 found a moment ago is trusted from memory.
    expect((await w.reserve({ accountId: id, amount: 1_000n })).ok).toBe(false);
    w.balanceGrew(id);
    expect((await w.reserve({ accountId: id, amount: 1_000n })).ok).toBe(true);
    await w.close();
  });
});

describe('two replicas, one small balance', () => {
  it('every cent is usable from either replica: no 402 while the balance covers the call', async () => {
    const bound = 10_000n;
    const id = await newAccount(bound * 10n);
    const a = await replica();
    const b = await replica();
    for (let i = 0; i < 10; i++) {
      const r = await (i % 2 ? b : a).reserve({ accountId: id, amount: bound });
      expect(r.ok, `call ${i} on replica ${i % 2 ? 'b' : 'a'}`).toBe(true);
      if (r.ok) r.hold.settle(bound, usage);
    }
    expect((await a.reserve({ accountId: id, amount: 1n })).ok).toBe(false);
    expect((await b.reserve({ accountId: id, amount: 1n })).ok).toBe(false);
    await a.close();
    await b.close();
    expect(await account(id)).toEqual({ balance: 0n, leased: 0n, paid: true, freeUsed: 0 });
    expect(await ledgerSum(id)).toBe(0n);
  });

  it('100 concurrent spenders on two replicas never overspend, and the ledger is exact', async () => {
    const bound = 1_000n;
    const credit = 400_000n; // about 530 calls at 0.75 of the bound on average
    const id = await newAccount(credit);
    const a = await replica();
    const b = await replica();
    let lowest = credit;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { balance } = await account(id);
        if (balance < lowest) lowest = balance;
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const [ra, rb] = await Promise.all([
      runSpenders(a, { accountId: id, spenders: 50, bound }),
      runSpenders(b, { accountId: id, spenders: 50, bound, seed: 500_000 }),
    ]);
    await a.close();
    await b.close();
    sampling = false;
    await sampler;
    const after = await account(id);
    expect(lowest).toBeGreaterThanOrEqual(0n);
    expect(after.leased).toBe(0n);
    expect(after.balance).toBe(credit - ra.charged - rb.charged); // every settled call charged, exactly
    expect(await ledgerSum(id)).toBe(after.balance);
    expect(ra.ok + rb.ok).toBeGreaterThan(400);
    expect(ra.refused + rb.refused).toBe(100); // every spender stopped on a 402
    const [u] = await query<{ requests: number; cost: string }>(
      'SELECT SUM(requests)::int AS requests, SUM(cost)::text AS cost FROM metered_usage WHERE account_id = $1',
      [id],
    );
    expect(u).toEqual({ requests: ra.ok + rb.ok, cost: String(ra.charged + rb.charged) });
    expect((await repo.reconcile()).mismatches).toEqual([]);
  });
});

describe('free queries', () => {
  it('an unpaid account gets exactly BERTH_FREE_QUERIES, under concurrency on two replicas', async () => {
    const id = await newAccount();
    const a = await replica({ freeQueries: 5 });
    const b = await replica({ freeQueries: 5 });
    const replicas = Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b));
    const results = await Promise.all(
      replicas.map((w) => w.reserve({ accountId: id, amount: 700n, free: true })),
    );
    const granted = results.flatMap((r, i) => (r.ok ? [{ hold: r.hold, replica: replicas[i]! }] : []));
    expect(granted).toHaveLength(5);
    expect(granted.every((g) => g.hold.free)).toBe(true);
    expect(await account(id)).toMatchObject({ freeUsed: 5, balance: 0n, paid: false });
    // A free query whose call never ran is given back, and can be used again.
    const [first, ...rest] = granted;
    first!.hold.release();
    await eventually(async () => (await account(id)).freeUsed === 4, { timeout: 5_000, interval: 50 });
    const again = await first!.replica.reserve({ accountId: id, amount: 700n, free: true });
    expect(again.ok && again.hold.free).toBe(true);
    expect((await a.reserve({ accountId: id, amount: 700n, free: true })).ok).toBe(false);
    expect((await b.reserve({ accountId: id, amount: 700n, free: true })).ok).toBe(false);
    // Settled free queries are recorded as usage, at no cost.
    for (const g of rest) g.hold.settle(0n, usage);
    if (again.ok) again.hold.settle(0n, usage);
    await a.close();
    await b.close();
    const [u] = await query<{ requests: number; free: number; cost: string }>(
      'SELECT SUM(requests)::int AS requests, SUM(free_requests)::int AS free, SUM(cost)::text AS cost FROM metered_usage WHERE account_id = $1',
      [id],
    );
    expect(u).toEqual({ requests: 5, free: 5, cost: '0' });
  });

  it('a paid account has no free queries: its calls are charged', async () => {
    const id = await newAccount(10_000n);
    const w = await replica({ freeQueries: 5 });
    const r = await w.reserve({ accountId: id, amount: 700n, free: true });
    expect(r.ok && !r.hold.free).toBe(true);
    await w.close();
  });
});

describe('a second replica in its own process', () => {
  function spawnSpender(accountId: string, spenders: number, bound: bigint) {
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        'test/support/billing-spender.ts',
        'spend',
        tdb.url,
        accountId,
        String(spenders),
        String(bound),
      ],
      { cwd: root, stdio: ['pipe', 'pipe', 'inherit'] },
    );
    const lines = createInterface({ input: child.stdout! });
    const next = () => new Promise<string>((resolve) => lines.once('line', resolve));
    return { child, next };
  }

  it('100 concurrent spenders across two processes never take the balance below zero', async () => {
    const bound = 2_000n;
    const credit = 1_000_000n;
    const id = await newAccount(credit);
    const other = spawnSpender(id, 50, bound);
    expect(await other.next()).toBe('ready');
    const here = await replica();
    await here.reserve({ accountId: 'acct_warm_up', amount: 1n });
    const done = other.next();
    other.child.stdin!.write('go\n');
    const mine = await runSpenders(here, { accountId: id, spenders: 50, bound });
    await here.close();
    const theirs = JSON.parse(await done) as Omit<SpendResult, 'charged'> & { charged: string };
    const after = await account(id);
    expect(after.balance).toBeGreaterThanOrEqual(0n);
    expect(after.leased).toBe(0n);
    expect(after.balance).toBe(credit - mine.charged - BigInt(theirs.charged));
    expect(await ledgerSum(id)).toBe(after.balance);
    // Both replicas really spent from the same balance at the same time.
    expect(mine.ok).toBeGreaterThan(50);
    expect(theirs.ok).toBeGreaterThan(50);
    expect(mine.refused + theirs.refused).toBe(100);
    expect((await repo.reconcile()).mismatches).toEqual([]);
  }, 120_000);

  it('a killed replica: its lease comes back after the ttl, its unflushed calls are not charged', async () => {
    const id = await newAccount(20_000n);
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/support/billing-spender.ts', 'hold', tdb.url, id, '18000', '3000'],
      { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const lines = createInterface({ input: child.stdout! });
    expect(await new Promise((r) => lines.once('line', r))).toBe('holding');
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    // settleWaitMs 0: refused at once rather than waiting for the dead lease (counted as held).
    const here = await replica({ reclaimWaitMs: 200, settleWaitMs: 0 });
    // The dead replica holds all but what leaseGrant left free; it cannot answer a reclaim.
    const { leased } = await account(id);
    expect(leased).toBeGreaterThan(10_000n);
    expect((await here.reserve({ accountId: id, amount: 15_000n })).ok).toBe(false);
    // After its ttl (5 s) the lease goes back to the account: the full balance is usable again, and
    // the call it settled but never flushed was not charged (under-charged, never over-charged).
    await eventually(async () => (await here.reserve({ accountId: id, amount: 20_000n })).ok, {
      timeout: 15_000,
      interval: 1_000,
    });
    await here.close();
    expect(await ledgerSum(id)).toBe(20_000n);
  }, 60_000);
});
