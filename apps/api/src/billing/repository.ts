// Data access for balances, the ledger, leases and metered usage. Every change of a balance happens
// in one transaction with the ledger entry that explains it, under the account row's lock, so the
// ledger always sums to the balance (see `reconcile`). The database refuses the rest on its own:
// CHECK constraints (balance >= 0, 0 <= leased <= balance) and append-only triggers.
import { Prisma, type PrismaClient } from '@berth/db';
import { leaseGrant } from './lease-policy.ts';

export type LedgerKind = 'credit' | 'charge' | 'refund' | 'adjustment';
export const LEDGER_KINDS = ['credit', 'charge', 'refund', 'adjustment'] as const satisfies LedgerKind[];

export interface LedgerRow {
  id: bigint;
  accountId: string;
  kind: LedgerKind;
  amount: bigint;
  balanceAfter: bigint;
  reference: string | null;
  createdAt: Date;
}

export interface AccountBalance {
  balance: bigint;
  leased: bigint;
  paid: boolean;
  freeQueriesUsed: number;
}

/** One (key, model, minute) of metered calls, added to the stored sums. */
export interface UsageRow {
  keyId: string;
  model: string;
  periodStart: Date;
  requests: number;
  freeRequests: number;
  promptTokens: number;
  completionTokens: number;
  cost: bigint;
}

export interface DailyUsage {
  day: string;
  model: string;
  requests: number;
  freeRequests: number;
  promptTokens: bigint;
  completionTokens: bigint;
  cost: bigint;
}

export type PostResult =
  | { status: 'created' | 'replayed'; entry: LedgerRow }
  | { status: 'conflict'; entry: LedgerRow }
  | { status: 'no_account' }
  | { status: 'insufficient'; available: bigint };

/**
 * One write of a replica's lease on an account: apply a batch of settled calls, ask for more, give
 * some back. Whatever is asked, the lease's expiry is pushed to now + ttl.
 */
export interface SyncRequest {
  accountId: string;
  replica: string;
  ttlMs: number;
  /** Calls settled since the last batch: one charge entry, the usage sums, at most once. */
  batch?: { seq: bigint; amount: bigint; calls: number; usage: UsageRow[] };
  /** Lend more: at least `need` (else nothing), up to `want` (see leaseGrant). */
  grant?: { need: bigint; want: bigint };
  /** Shrink the lease to this much (0: give it all back). */
  keep?: bigint;
  /** Announce availability even if nothing was given back (an answer to a reclaim request). */
  announce?: boolean;
}

export interface SyncResult {
  exists: boolean;
  /** The batch was applied now (false: it had been already, or there was none). */
  applied: boolean;
  charged: bigint;
  /** Part of the batch nothing covered (the lease was gone and the balance spent): not charged. */
  uncollected: bigint;
  granted: bigint;
  /** The lease's amount after this write. */
  lease: bigint;
  /** The account's balance that no replica holds, after this write. */
  free: bigint;
  paid: boolean;
  freeQueriesUsed: number;
  /** Other replicas holding a slice of this account, when a grant fell short. */
  holders: string[];
}

export interface ReconciliationRow {
  accountId: string;
  balance: bigint | null;
  ledgerTotal: bigint;
  lastBalanceAfter: bigint | null;
  leased: bigint | null;
  leaseTotal: bigint;
}

export interface BillingRepository {
  accountExists(accountId: string): Promise<boolean>;
  /** Null when the account has never had a balance row (it has no money and used no free query). */
  balance(accountId: string): Promise<AccountBalance | null>;
  /** A credit, refund or adjustment, idempotent on (account, key). */
  post(entry: {
    accountId: string;
    kind: Exclude<LedgerKind, 'charge'>;
    amount: bigint;
    idempotencyKey: string;
    reference: string | null;
  }): Promise<PostResult>;
  ledger(
    accountId: string,
    filter: { kinds?: LedgerKind[]; from?: Date; to?: Date; before?: bigint; limit: number },
  ): Promise<LedgerRow[]>;
  usage(accountId: string, range: { from: Date; to: Date }): Promise<DailyUsage[]>;
  /** Takes one free query if the account is unpaid and has one left, atomically. */
  takeFreeQuery(
    accountId: string,
    limit: number,
  ): Promise<{ exists: boolean; taken: boolean; paid: boolean; freeQueriesUsed: number }>;
  giveBackFreeQuery(accountId: string): Promise<void>;
  sync(req: SyncRequest): Promise<SyncResult>;
  /** Ask every replica holding a slice of the account to give back what it is not using. */
  requestReclaim(accountId: string, replica: string): Promise<void>;
  /** Accounts whose balance is not the sum of their ledger, or whose leases do not add up. */
  reconcile(): Promise<{ accounts: number; mismatches: ReconciliationRow[] }>;
  /** Forgets empty leases untouched for `olderThanMs` (their batch markers are long settled). */
  pruneLeases(olderThanMs: number): Promise<number>;
}

/** The NOTIFY channel of billing events (see notifications.ts). */
export const BILLING_CHANNEL = 'berth_billing';

type Tx = Prisma.TransactionClient;

const TX_OPTIONS = { maxWait: 10_000, timeout: 15_000 };

const ledgerColumns = {
  id: true,
  accountId: true,
  kind: true,
  amount: true,
  balanceAfter: true,
  reference: true,
  createdAt: true,
} as const;

async function lockAccount(tx: Tx, accountId: string): Promise<AccountBalance | null> {
  const select = () => tx.$queryRaw<AccountBalance[]>`
    SELECT balance, leased, paid, free_queries_used AS "freeQueriesUsed"
    FROM billing_accounts WHERE account_id = ${accountId} FOR UPDATE`;
  const rows = await select();
  if (rows[0]) return rows[0];
  await tx.$executeRaw`
    INSERT INTO billing_accounts (account_id) SELECT id FROM accounts WHERE id = ${accountId}
    ON CONFLICT DO NOTHING`;
  return (await select())[0] ?? null;
}

/** Leases whose replica stopped renewing them go back to the account; returns how much. */
async function reclaimExpired(tx: Tx, accountId: string): Promise<bigint> {
  // RETURNING shows the new row: the amount taken back is read from the locked old one.
  const [row] = await tx.$queryRaw<{ n: bigint }[]>`
    WITH old AS (
      SELECT replica, amount FROM billing_leases
      WHERE account_id = ${accountId} AND amount > 0 AND expires_at < now()
      FOR UPDATE
    ), r AS (
      UPDATE billing_leases l SET amount = 0, updated_at = now()
      FROM old WHERE l.account_id = ${accountId} AND l.replica = old.replica
      RETURNING old.amount
    )
    SELECT COALESCE(SUM(amount), 0)::bigint AS n FROM r`;
  return row?.n ?? 0n;
}

/** `grew`: the free balance grew (false: an answer to a reclaim that had nothing to give back). */
async function announce(tx: Tx, accountId: string, replica: string | null, grew = true): Promise<void> {
  const payload = JSON.stringify({ t: 'available', a: accountId, r: replica, g: grew });
  await tx.$executeRaw`SELECT pg_notify(${BILLING_CHANNEL}, ${payload})`;
}

async function addUsage(tx: Tx, accountId: string, rows: UsageRow[]): Promise<void> {
  if (!rows.length) return;
  const values = rows.map(
    (r) =>
      Prisma.sql`(${accountId}, ${r.keyId}, ${r.model}, ${r.periodStart}::timestamptz, ${r.requests}, ${r.freeRequests}, ${r.promptTokens}::bigint, ${r.completionTokens}::bigint, ${r.cost}::bigint)`,
  );
  await tx.$executeRaw`
    INSERT INTO metered_usage (account_id, key_id, model, period_start, requests, free_requests, prompt_tokens, completion_tokens, cost)
    VALUES ${Prisma.join(values)}
    ON CONFLICT (account_id, key_id, model, period_start) DO UPDATE SET
      requests = metered_usage.requests + excluded.requests,
      free_requests = metered_usage.free_requests + excluded.free_requests,
      prompt_tokens = metered_usage.prompt_tokens + excluded.prompt_tokens,
      completion_tokens = metered_usage.completion_tokens + excluded.completion_tokens,
      cost = metered_usage.cost + excluded.cost`;
}

const min = (a: bigint, b: bigint) => (a < b ? a : b);

export function billingRepository(prisma: PrismaClient): BillingRepository {
  const balance = (accountId: string): Promise<AccountBalance | null> =>
    prisma.billingAccount.findUnique({
      where: { accountId },
      select: { balance: true, leased: true, paid: true, freeQueriesUsed: true },
    });
  return {
    async accountExists(accountId) {
      return (await prisma.account.count({ where: { id: accountId } })) > 0;
    },

    balance,

    post(entry) {
      return prisma.$transaction(async (tx): Promise<PostResult> => {
        const account = await lockAccount(tx, entry.accountId);
        if (!account) return { status: 'no_account' };
        const existing = await tx.ledgerEntry.findUnique({
          where: {
            accountId_idempotencyKey: { accountId: entry.accountId, idempotencyKey: entry.idempotencyKey },
          },
          select: ledgerColumns,
        });
        if (existing) {
          const same =
            existing.kind === entry.kind &&
            existing.amount === entry.amount &&
            existing.reference === entry.reference;
          return { status: same ? 'replayed' : 'conflict', entry: existing };
        }
        let leased = account.leased;
        const reclaimed = await reclaimExpired(tx, entry.accountId);
        leased -= reclaimed;
        if (entry.amount < 0n && account.balance - leased < -entry.amount) {
          if (reclaimed > 0n)
            await tx.billingAccount.update({ where: { accountId: entry.accountId }, data: { leased } });
          return { status: 'insufficient', available: account.balance - leased };
        }
        const balance = account.balance + entry.amount;
        const created = await tx.ledgerEntry.create({
          data: {
            accountId: entry.accountId,
            kind: entry.kind,
            amount: entry.amount,
            balanceAfter: balance,
            idempotencyKey: entry.idempotencyKey,
            reference: entry.reference,
          },
          select: ledgerColumns,
        });
        await tx.$executeRaw`
          UPDATE billing_accounts SET balance = ${balance}, leased = ${leased},
            paid = paid OR ${entry.kind === 'credit'}, updated_at = now()
          WHERE account_id = ${entry.accountId}`;
        if (entry.amount > 0n || reclaimed > 0n) await announce(tx, entry.accountId, null);
        return { status: 'created', entry: created };
      }, TX_OPTIONS);
    },

    ledger(accountId, f) {
      return prisma.ledgerEntry.findMany({
        where: {
          accountId,
          ...(f.kinds?.length ? { kind: { in: f.kinds } } : {}),
          ...(f.from || f.to
            ? { createdAt: { ...(f.from ? { gte: f.from } : {}), ...(f.to ? { lt: f.to } : {}) } }
            : {}),
          ...(f.before !== undefined ? { id: { lt: f.before } } : {}),
        },
        orderBy: { id: 'desc' },
        take: f.limit,
        select: ledgerColumns,
      });
    },

    usage(accountId, range) {
      return prisma.$queryRaw<DailyUsage[]>`
        SELECT to_char(period_start AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, model,
          SUM(requests)::int AS requests, SUM(free_requests)::int AS "freeRequests",
          SUM(prompt_tokens)::bigint AS "promptTokens", SUM(completion_tokens)::bigint AS "completionTokens",
          SUM(cost)::bigint AS cost
        FROM metered_usage
        WHERE account_id = ${accountId} AND period_start >= ${range.from}::timestamptz
          AND period_start < ${range.to}::timestamptz
        GROUP BY 1, 2 ORDER BY 1, 2`;
    },

    async takeFreeQuery(accountId, limit) {
      const take = () => prisma.$queryRaw<{ paid: boolean; freeQueriesUsed: number }[]>`
        UPDATE billing_accounts SET free_queries_used = free_queries_used + 1, updated_at = now()
        WHERE account_id = ${accountId} AND NOT paid AND free_queries_used < ${limit}
        RETURNING paid, free_queries_used AS "freeQueriesUsed"`;
      let [row] = await take();
      if (row) return { exists: true, taken: true, ...row };
      let current = await balance(accountId);
      if (!current) {
        await prisma.$executeRaw`
          INSERT INTO billing_accounts (account_id) SELECT id FROM accounts WHERE id = ${accountId}
          ON CONFLICT DO NOTHING`;
        [row] = await take();
        if (row) return { exists: true, taken: true, ...row };
        current = await balance(accountId);
        if (!current) return { exists: false, taken: false, paid: false, freeQueriesUsed: 0 };
      }
      return { exists: true, taken: false, paid: current.paid, freeQueriesUsed: current.freeQueriesUsed };
    },

    async giveBackFreeQuery(accountId) {
      await prisma.$executeRaw`
        UPDATE billing_accounts SET free_queries_used = free_queries_used - 1, updated_at = now()
        WHERE account_id = ${accountId} AND free_queries_used > 0`;
    },

    sync(req) {
      return prisma.$transaction(async (tx): Promise<SyncResult> => {
        const result: SyncResult = {
          exists: false,
          applied: false,
          charged: 0n,
          uncollected: 0n,
          granted: 0n,
          lease: 0n,
          free: 0n,
          paid: false,
          freeQueriesUsed: 0,
          holders: [],
        };
        const account = await lockAccount(tx, req.accountId);
        if (!account) return result;
        Object.assign(result, { exists: true, paid: account.paid, freeQueriesUsed: account.freeQueriesUsed });
        let { balance, leased } = account;
        const reclaimed = await reclaimExpired(tx, req.accountId);
        leased -= reclaimed;
        const [mine] = await tx.$queryRaw<{ amount: bigint; lastBatch: bigint }[]>`
          SELECT amount, last_batch AS "lastBatch" FROM billing_leases
          WHERE account_id = ${req.accountId} AND replica = ${req.replica}`;
        let lease = mine?.amount ?? 0n;
        let lastBatch = mine?.lastBatch ?? 0n;
        let returned = reclaimed;

        const batch = req.batch;
        if (batch && batch.seq > lastBatch) {
          // Charged from the lease first; a lease that expired and was taken back (a replica cut off
          // from the database longer than the ttl) is covered by what nobody holds, never beyond.
          const fromLease = min(lease, batch.amount);
          const fromFree = min(batch.amount - fromLease, balance - leased);
          result.charged = fromLease + fromFree;
          result.uncollected = batch.amount - result.charged;
          lease -= fromLease;
          leased -= fromLease;
          if (result.charged > 0n) {
            balance -= result.charged;
            const reference =
              `${batch.calls} call${batch.calls === 1 ? '' : 's'}` +
              (result.uncollected > 0n ? ` (${result.uncollected} units uncollected)` : '');
            await tx.ledgerEntry.create({
              data: {
                accountId: req.accountId,
                kind: 'charge',
                amount: -result.charged,
                balanceAfter: balance,
                idempotencyKey: `charge:${req.replica}:${batch.seq}`,
                reference,
              },
              select: { id: true },
            });
          }
          await addUsage(tx, req.accountId, batch.usage);
          lastBatch = batch.seq;
          result.applied = true;
        }
        if (req.grant) {
          const granted = leaseGrant(balance - leased, req.grant.need, req.grant.want);
          lease += granted;
          leased += granted;
          result.granted = granted;
          if (granted < req.grant.need || granted === 0n) {
            result.holders = (
              await tx.$queryRaw<{ replica: string }[]>`
                SELECT replica FROM billing_leases
                WHERE account_id = ${req.accountId} AND replica <> ${req.replica} AND amount > 0`
            ).map((r) => r.replica);
          }
        }
        if (req.keep !== undefined && lease > req.keep) {
          returned += lease - req.keep;
          leased -= lease - req.keep;
          lease = req.keep;
        }
        await tx.$executeRaw`
          INSERT INTO billing_leases (account_id, replica, amount, expires_at, last_batch, updated_at)
          VALUES (${req.accountId}, ${req.replica}, ${lease}, now() + ${req.ttlMs} * interval '1 millisecond', ${lastBatch}, now())
          ON CONFLICT (account_id, replica) DO UPDATE SET amount = excluded.amount,
            expires_at = excluded.expires_at, last_batch = excluded.last_batch, updated_at = now()`;
        if (balance !== account.balance || leased !== account.leased) {
          await tx.$executeRaw`
            UPDATE billing_accounts SET balance = ${balance}, leased = ${leased}, updated_at = now()
            WHERE account_id = ${req.accountId}`;
        }
        if (returned > 0n || req.announce) await announce(tx, req.accountId, req.replica, returned > 0n);
        result.lease = lease;
        result.free = balance - leased;
        return result;
      }, TX_OPTIONS);
    },

    async requestReclaim(accountId, replica) {
      const payload = JSON.stringify({ t: 'reclaim', a: accountId, r: replica });
      await prisma.$executeRaw`SELECT pg_notify(${BILLING_CHANNEL}, ${payload})`;
    },

    async reconcile() {
      const [count] = await prisma.$queryRaw<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM billing_accounts`;
      // One statement, one snapshot: balances, ledger sums and leases are read at the same instant.
      const mismatches = await prisma.$queryRaw<ReconciliationRow[]>`
        WITH l AS (
          SELECT account_id, SUM(amount)::bigint AS total,
            (array_agg(balance_after ORDER BY id DESC))[1] AS last_balance
          FROM ledger_entries GROUP BY account_id
        ), x AS (
          SELECT account_id, SUM(amount)::bigint AS total FROM billing_leases GROUP BY account_id
        )
        SELECT COALESCE(b.account_id, l.account_id, x.account_id) AS "accountId",
          b.balance, COALESCE(l.total, 0)::bigint AS "ledgerTotal", l.last_balance AS "lastBalanceAfter",
          b.leased, COALESCE(x.total, 0)::bigint AS "leaseTotal"
        FROM billing_accounts b
          FULL JOIN l ON l.account_id = b.account_id
          FULL JOIN x ON x.account_id = COALESCE(b.account_id, l.account_id)
        WHERE b.balance IS DISTINCT FROM COALESCE(l.total, 0)
          OR (l.last_balance IS NOT NULL AND l.last_balance <> b.balance)
          OR b.leased IS DISTINCT FROM COALESCE(x.total, 0)
        ORDER BY 1`;
      return { accounts: count?.n ?? 0, mismatches };
    },

    async pruneLeases(olderThanMs) {
      return prisma.$executeRaw`
        DELETE FROM billing_leases
        WHERE amount = 0 AND updated_at < now() - ${olderThanMs} * interval '1 millisecond'`;
    },
  };
}
