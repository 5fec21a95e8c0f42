// The leases of replicas on accounts' balances (./wallet.ts), as the database holds them: the account
// row's lock every balance change takes, expired leases reclaimed, and one lease write (syncLease).
// The CHECK constraints keep the leases within the balance whatever a replica asks.
import { Prisma, type PrismaClient } from '@berth/db';
import { chargeKeys, syncKeys, type KeyCharge, type KeyOp, type KeyResult } from './key-lease-repository.ts';
import { leaseGrant } from './lease-policy.ts';
import { BILLING_CHANNEL } from './notifications.ts';

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

/**
 * One write of a replica's lease on an account: apply a batch of settled calls, ask for more, give
 * some back. Whatever is asked, the lease's expiry is pushed to now + ttl.
 */
export interface SyncRequest {
  accountId: string;
  replica: string;
  ttlMs: number;
  /** Calls settled since the last batch: one charge entry, the usage sums, at most once. */
  batch?: { seq: bigint; amount: bigint; calls: number; usage: UsageRow[]; keys?: readonly KeyCharge[] };
  /** Lend more: at least `need` (else nothing), up to `want` (see leaseGrant). */
  grant?: { need: bigint; want: bigint };
  /** Shrink the lease to this much (0: give it all back). */
  keep?: bigint;
  /** Announce availability even if nothing was given back (an answer to a reclaim request). */
  announce?: boolean;
  /** Keys with spend limits: learned, lent, shrunk; this replica's key slices are renewed too. */
  keys?: readonly KeyOp[];
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
  /** Other replicas holding a slice of this account (or of a key asked for), when a grant fell short. */
  holders: string[];
  /** What the other replicas' slices of the account hold, when a grant fell short (else 0). */
  othersLeased: bigint;
  /** The keys the write named. */
  keys: KeyResult[];
}

export type Tx = Prisma.TransactionClient;

export const TX_OPTIONS = { maxWait: 10_000, timeout: 15_000 };

export async function lockAccount(tx: Tx, accountId: string): Promise<AccountBalance | null> {
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
export async function reclaimExpired(tx: Tx, accountId: string): Promise<bigint> {
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
export async function announce(
  tx: Tx,
  accountId: string,
  replica: string | null,
  grew = true,
): Promise<void> {
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

/**
 * One write of a replica's lease on an account (see SyncRequest), in one transaction under the
 * account row's lock: others' expired leases reclaimed, the batch charged once (from the lease, then
 * from what nobody holds, never below zero), more lent or some given back, the expiry pushed on.
 */
export function syncLease(prisma: PrismaClient, req: SyncRequest): Promise<SyncResult> {
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
      othersLeased: 0n,
      keys: [],
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
        const reference = `${batch.calls} call${batch.calls === 1 ? '' : 's'}`;
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
      if (batch.keys?.length) await chargeKeys(tx, req.accountId, req.replica, batch.keys);
      lastBatch = batch.seq;
      result.applied = true;
    }
    if (req.grant) {
      const granted = leaseGrant(balance - leased, req.grant.need, req.grant.want);
      lease += granted;
      leased += granted;
      result.granted = granted;
      if (granted < req.grant.need || granted === 0n) {
        const others = await tx.$queryRaw<{ replica: string; amount: bigint }[]>`
          SELECT replica, amount FROM billing_leases
          WHERE account_id = ${req.accountId} AND replica <> ${req.replica} AND amount > 0`;
        result.holders = others.map((r) => r.replica);
        result.othersLeased = others.reduce((sum, r) => sum + r.amount, 0n);
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
    if (req.keys?.length) {
      const keys = await syncKeys(tx, {
        accountId: req.accountId,
        replica: req.replica,
        ttlMs: req.ttlMs,
        ops: req.keys,
      });
      result.keys = keys.results;
      for (const h of keys.holders) if (!result.holders.includes(h)) result.holders.push(h);
    }
    // A key slice given back is announced like balance: replicas waiting on that key look again.
    const grew = returned > 0n || !!req.keys?.some((k) => k.keep !== undefined);
    if (grew || req.announce) await announce(tx, req.accountId, req.replica, grew);
    result.lease = lease;
    result.free = balance - leased;
    return result;
  }, TX_OPTIONS);
}
