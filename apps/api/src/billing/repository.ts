// Data access for balances, the ledger, leases (./lease-repository.ts) and metered usage. Every change of a
// balance happens in one transaction with the ledger entry that explains it, under the account row's lock, so
// the ledger always sums to the balance (see `reconcile`). The database refuses the rest on its own: CHECK
// constraints (balance >= 0, 0 <= leased <= balance) and append-only triggers.
import type { PrismaClient } from '@berth/db';
import { MAX_BALANCE } from '../platform/money.ts';
import { BILLING_CHANNEL } from './notifications.ts';
import {
  announce,
  lockAccount,
  reclaimExpired,
  syncLease,
  TX_OPTIONS,
  type AccountBalance,
  type SyncRequest,
  type SyncResult,
} from './lease-repository.ts';

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
  | { status: 'insufficient'; available: bigint }
  /** The balance would pass MAX_BALANCE: nothing is written. */
  | { status: 'too_large'; balance: bigint };

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

const ledgerColumns = {
  id: true,
  accountId: true,
  kind: true,
  amount: true,
  balanceAfter: true,
  reference: true,
  createdAt: true,
} as const;

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
        if (balance > MAX_BALANCE) {
          if (reclaimed > 0n)
            await tx.billingAccount.update({ where: { accountId: entry.accountId }, data: { leased } });
          return { status: 'too_large', balance: account.balance };
        }
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

    sync: (req) => syncLease(prisma, req),

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
