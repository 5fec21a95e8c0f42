// Keys' spend limits in the database, inside a lease write (./lease-repository.ts) and under the same
// account row lock: what a line of keys (api_keys.lineage, else its id) was charged per period
// (key_spend), and each replica's slice of what is left of the current period (key_leases). The
// period is the database's (berth_period_start/berth_period_end, one definition in the migration).
import { Prisma } from '@berth/db';
import { leaseGrant } from './lease-policy.ts';

type Tx = Prisma.TransactionClient;

export type SpendPeriod = 'day' | 'week' | 'month';

/** What a write asks of one key: learn its limit, lend more of its allowance, give some back. */
export interface KeyOp {
  keyId: string;
  grant?: { need: bigint; want: bigint };
  keep?: bigint;
}

/** Calls settled under one line of keys' allowance, in one period. */
export interface KeyCharge {
  lineage: string;
  period: SpendPeriod;
  periodStart: Date;
  amount: bigint;
}

export interface KeyResult {
  keyId: string;
  /** The key's line (the key's own id for a key never rotated, or one this account does not hold). */
  lineage: string;
  /** Null: the key has no spend limit. */
  limit: {
    amount: bigint;
    period: SpendPeriod;
    periodStart: Date;
    periodEnd: Date;
    /** Charged in the period so far, as written. */
    spent: bigint;
    /** This replica's slice after the write. */
    lease: bigint;
    /** Neither spent nor lent to any replica. */
    free: bigint;
    othersLeased: bigint;
    granted: bigint;
  } | null;
}

/** Counts a batch's charges in each line's period, and takes them out of this replica's slices. */
export async function chargeKeys(
  tx: Tx,
  accountId: string,
  replica: string,
  charges: readonly KeyCharge[],
): Promise<void> {
  const merged = new Map<string, KeyCharge>();
  for (const c of charges) {
    const k = `${c.lineage}\u0000${c.period}\u0000${c.periodStart.getTime()}`;
    const m = merged.get(k);
    merged.set(k, m ? { ...m, amount: m.amount + c.amount } : c);
  }
  for (const c of merged.values()) {
    if (c.amount <= 0n) continue;
    await tx.$executeRaw`
      INSERT INTO key_spend (lineage, period, period_start, account_id, spent)
      VALUES (${c.lineage}, ${c.period}::"SpendPeriod", ${c.periodStart}::timestamptz, ${accountId}, ${c.amount})
      ON CONFLICT (lineage, period, period_start) DO UPDATE SET spent = key_spend.spent + excluded.spent`;
    await tx.$executeRaw`
      UPDATE key_leases SET amount = GREATEST(0, amount - ${c.amount})
      WHERE lineage = ${c.lineage} AND replica = ${replica} AND period = ${c.period}::"SpendPeriod"
        AND period_start = ${c.periodStart}::timestamptz`;
  }
}

interface KeyRow {
  id: string;
  lineage: string;
  limit: bigint | null;
  period: SpendPeriod | null;
  periodStart: Date | null;
  periodEnd: Date | null;
}

/**
 * The keys a write names: their limits, and this replica's slices lent, shrunk or renewed. Slices of
 * replicas that stopped renewing them, and of past periods, go back first. Returns each key's state
 * and the other replicas holding a slice of a line whose grant fell short.
 */
export async function syncKeys(
  tx: Tx,
  req: { accountId: string; replica: string; ttlMs: number; ops: readonly KeyOp[] },
): Promise<{ results: KeyResult[]; holders: string[] }> {
  const { accountId, replica, ttlMs } = req;
  await tx.$executeRaw`
    UPDATE key_leases SET amount = 0
    WHERE account_id = ${accountId} AND amount > 0
      AND (expires_at < now() OR period_start < berth_period_start(period, now()))`;
  await tx.$executeRaw`
    UPDATE key_leases SET expires_at = now() + ${ttlMs} * interval '1 millisecond'
    WHERE account_id = ${accountId} AND replica = ${replica}`;
  const ids = [...new Set(req.ops.map((o) => o.keyId))];
  if (!ids.length) return { results: [], holders: [] };
  const rows = await tx.$queryRaw<KeyRow[]>`
    SELECT id, COALESCE(lineage, id) AS lineage, spend_limit AS "limit", spend_period AS period,
      berth_period_start(spend_period, now()) AS "periodStart", berth_period_end(spend_period, now()) AS "periodEnd"
    FROM api_keys WHERE account_id = ${accountId} AND id IN (${Prisma.join(ids)})`;
  const byId = new Map(rows.map((r) => [r.id, r]));
  const results: KeyResult[] = [];
  const holders = new Set<string>();
  for (const op of req.ops) {
    const row = byId.get(op.keyId);
    if (!row || row.limit === null || !row.period || !row.periodStart || !row.periodEnd) {
      const lineage = row?.lineage ?? op.keyId;
      await tx.$executeRaw`
        UPDATE key_leases SET amount = 0 WHERE lineage = ${lineage} AND replica = ${replica} AND amount > 0`;
      results.push({ keyId: op.keyId, lineage, limit: null });
      continue;
    }
    const { lineage, period, periodStart } = row;
    const [state] = await tx.$queryRaw<{ spent: bigint; others: bigint; mine: bigint; holders: string[] }[]>`
      SELECT
        COALESCE((SELECT spent FROM key_spend WHERE lineage = ${lineage} AND period = ${period}::"SpendPeriod"
          AND period_start = ${periodStart}::timestamptz), 0)::bigint AS spent,
        COALESCE((SELECT SUM(amount) FROM key_leases WHERE lineage = ${lineage} AND replica <> ${replica}
          AND period = ${period}::"SpendPeriod" AND period_start = ${periodStart}::timestamptz), 0)::bigint AS others,
        COALESCE((SELECT amount FROM key_leases WHERE lineage = ${lineage} AND replica = ${replica}
          AND period = ${period}::"SpendPeriod" AND period_start = ${periodStart}::timestamptz), 0)::bigint AS mine,
        ARRAY(SELECT replica FROM key_leases WHERE lineage = ${lineage} AND replica <> ${replica}
          AND period = ${period}::"SpendPeriod" AND period_start = ${periodStart}::timestamptz AND amount > 0) AS holders`;
    const spent = state!.spent;
    const others = state!.others;
    let mine = state!.mine;
    const unlent = row.limit - spent - others - mine;
    let granted = 0n;
    if (op.grant) {
      granted = leaseGrant(unlent > 0n ? unlent : 0n, op.grant.need, op.grant.want);
      mine += granted;
      if (granted < op.grant.need || granted === 0n) for (const h of state!.holders) holders.add(h);
    }
    if (op.keep !== undefined && mine > op.keep) mine = op.keep;
    await tx.$executeRaw`
      INSERT INTO key_leases (lineage, replica, account_id, period, period_start, amount, expires_at)
      VALUES (${lineage}, ${replica}, ${accountId}, ${period}::"SpendPeriod", ${periodStart}::timestamptz, ${mine},
        now() + ${ttlMs} * interval '1 millisecond')
      ON CONFLICT (lineage, replica) DO UPDATE SET account_id = excluded.account_id, period = excluded.period,
        period_start = excluded.period_start, amount = excluded.amount, expires_at = excluded.expires_at`;
    const free = row.limit - spent - others - mine;
    results.push({
      keyId: op.keyId,
      lineage,
      limit: {
        amount: row.limit,
        period,
        periodStart,
        periodEnd: row.periodEnd,
        spent,
        lease: mine,
        free: free > 0n ? free : 0n,
        othersLeased: others,
        granted,
      },
    });
  }
  return { results, holders: [...holders] };
}
