// Billing on real PostgreSQL as API replicas run it: a replica is a Wallet with its own connections
// and notification listener; accounts and keys are rows a test makes directly.
import { randomBytes } from 'node:crypto';
import { openDatabase, openMigratedDatabase } from '@berth/db';
import { pino } from 'pino';
import { postgresBillingEvents } from '../../apps/api/src/billing/notifications.ts';
import { billingRepository, type BillingRepository } from '../../apps/api/src/billing/repository.ts';
import { createWallet, type Wallet, type WalletConfig } from '../../apps/api/src/billing/wallet.ts';
import { TEST_WALLET_CONFIG } from './billing-spender.ts';
import { createTestDatabase, sql } from './postgres.ts';

export interface WalletReplica extends Wallet {
  /** Lease writes (database transactions) so far. */
  readonly syncs: number;
  close(): Promise<void>;
}

/** One replica on the database at `url` (closed by the returned close()). */
export async function walletReplica(url: string, config: Partial<WalletConfig> = {}): Promise<WalletReplica> {
  const logger = pino({ level: process.env.BILLING_TEST_LOG ?? 'silent' });
  const db = await openDatabase({ kind: 'postgres', url, poolSize: 4 });
  const events = await postgresBillingEvents({ url, logger });
  const real = billingRepository(db.prisma);
  let syncs = 0;
  const repo: BillingRepository = { ...real, sync: (r) => (syncs++, real.sync(r)) };
  const wallet = createWallet({ repo, events, logger, config: { ...TEST_WALLET_CONFIG, ...config } });
  let closed = false;
  return {
    ...wallet,
    get syncs() {
      return syncs;
    },
    async close() {
      if (closed) return;
      closed = true;
      await wallet.close();
      await events.close();
      await db.close();
    },
  };
}

/** A new account, credited `credit` micro-units when given (through the ledger, as the API does). */
export async function billingAccount(url: string, repo: BillingRepository, credit?: bigint): Promise<string> {
  const id = `acct_${randomBytes(8).toString('hex')}`;
  await sql(url, 'INSERT INTO accounts (id, name) VALUES ($1, $2)', [id, 'billing test']);
  if (credit !== undefined) {
    const r = await repo.post({
      accountId: id,
      kind: 'credit',
      amount: credit,
      idempotencyKey: `request:${id}`,
      reference: null,
    });
    if (r.status !== 'created') throw new Error(`credit: ${r.status}`);
  }
  return id;
}

/** A key of the account with a spend limit (`lineage`: the line it belongs to, for rotated keys). */
export async function limitedKey(
  url: string,
  accountId: string,
  limit: { amount: bigint; period: 'day' | 'week' | 'month' } | null,
  lineage?: string,
): Promise<string> {
  const id = `key_${randomBytes(8).toString('hex')}`;
  await sql(
    url,
    `INSERT INTO api_keys (id, account_id, name, scope, hash, prefix, spend_limit, spend_period, lineage)
     VALUES ($1, $2, 'limited', 'inference', $3, 'svc_live_xxxx', $4, $5::"SpendPeriod", $6)`,
    [
      id,
      accountId,
      randomBytes(32).toString('hex'),
      limit?.amount.toString() ?? null,
      limit?.period ?? null,
      lineage ?? null,
    ],
  );
  return id;
}

/** The account's balance and what replicas hold of it, and the sum of its ledger. */
export async function balanceOf(
  url: string,
  accountId: string,
): Promise<{ balance: bigint; leased: bigint; ledger: bigint }> {
  const [row] = await sql<{ balance: string; leased: string; ledger: string }>(
    url,
    `SELECT b.balance::text, b.leased::text,
       (SELECT COALESCE(SUM(amount), 0)::text FROM ledger_entries WHERE account_id = $1) AS ledger
     FROM billing_accounts b WHERE b.account_id = $1`,
    [accountId],
  );
  return { balance: BigInt(row!.balance), leased: BigInt(row!.leased), ledger: BigInt(row!.ledger) };
}

/** A fresh database, its repository, and replicas on it (all closed by close()). */
export interface BillingBed {
  url: string;
  repo: BillingRepository;
  replica(config?: Partial<WalletConfig>): Promise<WalletReplica>;
  /** A new account, credited `credit` micro-units when given. */
  account(credit?: bigint): Promise<string>;
  close(): Promise<void>;
}

export async function billingBed(name: string): Promise<BillingBed> {
  const tdb = await createTestDatabase(name);
  const main = await openMigratedDatabase({ kind: 'postgres', url: tdb.url, poolSize: 4 });
  const repo = billingRepository(main.prisma);
  const replicas: WalletReplica[] = [];
  return {
    url: tdb.url,
    repo,
    async replica(config = {}) {
      const r = await walletReplica(tdb.url, config);
      replicas.push(r);
      return r;
    },
    account: (credit) => billingAccount(tdb.url, repo, credit),
    async close() {
      for (const r of replicas) await r.close().catch(() => {});
      await main.close();
      await tdb.drop();
    },
  };
}
