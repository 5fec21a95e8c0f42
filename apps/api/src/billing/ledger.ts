// Balances and the ledger as the routes see them: credits and adjustments (idempotent), the balance
// with the account's free queries, the ledger page by page, usage per model and day, and the
// reconciliation check.
import type {
  BillingRepository,
  DailyUsage,
  LedgerKind,
  LedgerRow,
  PostResult,
  ReconciliationRow,
} from './repository.ts';

export interface Balance {
  balance: bigint;
  paid: boolean;
  freeQueriesRemaining: number;
}

export interface LedgerPage {
  entries: LedgerRow[];
  /** Pass as `before` for the next (older) page; absent on the last page. */
  next?: bigint;
}

export interface Ledger {
  /** A credit, refund or adjustment; the same idempotency key again returns the first entry. */
  post(
    accountId: string,
    entry: {
      kind: Exclude<LedgerKind, 'charge'>;
      amount: bigint;
      reference: string | null;
      idempotencyKey: string;
    },
  ): Promise<PostResult>;
  /** Null when there is no such account. */
  balance(accountId: string): Promise<Balance | null>;
  entries(
    accountId: string,
    filter: { kinds?: LedgerKind[]; from?: Date; to?: Date; before?: bigint; limit: number },
  ): Promise<LedgerPage>;
  usage(accountId: string, range: { from: Date; to: Date }): Promise<DailyUsage[]>;
  reconcile(): Promise<{ ok: boolean; accounts: number; mismatches: ReconciliationRow[] }>;
}

export function ledgerService(deps: { repo: BillingRepository; freeQueries: number }): Ledger {
  const { repo } = deps;
  return {
    post(accountId, entry) {
      // Caller-chosen keys live in their own namespace: they can never collide with the keys the
      // API gives the charges it writes (`charge:<replica>:<batch>`).
      return repo.post({ accountId, ...entry, idempotencyKey: `request:${entry.idempotencyKey}` });
    },
    async balance(accountId) {
      const row = await repo.balance(accountId);
      if (!row && !(await repo.accountExists(accountId))) return null;
      const paid = row?.paid ?? false;
      return {
        balance: row?.balance ?? 0n,
        paid,
        freeQueriesRemaining: paid ? 0 : Math.max(0, deps.freeQueries - (row?.freeQueriesUsed ?? 0)),
      };
    },
    async entries(accountId, filter) {
      const rows = await repo.ledger(accountId, { ...filter, limit: filter.limit + 1 });
      const entries = rows.slice(0, filter.limit);
      return rows.length > filter.limit ? { entries, next: entries.at(-1)!.id } : { entries };
    },
    usage: (accountId, range) => repo.usage(accountId, range),
    async reconcile() {
      const r = await repo.reconcile();
      return { ok: r.mismatches.length === 0, ...r };
    },
  };
}
