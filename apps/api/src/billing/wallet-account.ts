// One account as a wallet (./wallet.ts) holds it on this replica: the slice of its balance it was
// lent, what calls in flight reserve from that slice, and what settled calls owe until a write
// carries them to the database (./wallet-writer.ts).
import type { Logger } from 'pino';
import { leaseWant } from './lease-policy.ts';
import type { BillingRepository } from './repository.ts';
import type { KeyCharge, SpendPeriod } from './key-lease-repository.ts';
import type { UsageRow, SyncResult } from './lease-repository.ts';
import { LEASE_HORIZON_MS, LEASE_MIN_CALLS } from './wallet-config.ts';
import { KeyAllowances, keyAvailable, type KeyAllowance } from './wallet-keys.ts';

export interface CallUsage {
  keyId: string;
  /** The model's display name (or `tool:<id>`, `chronos` for fees). */
  model: string;
  promptTokens: number;
  completionTokens: number;
}

export interface Hold {
  readonly accountId: string;
  readonly amount: bigint;
  /** Paid by a free query: settling it charges nothing. */
  readonly free: boolean;
  /**
   * The call ran: charge `cost` (normally at most `amount`; more is charged in full, from the
   * account's unleased balance down to zero) and record its usage. Returns what was charged. A
   * second settle or a release after it does nothing.
   */
  settle(cost: bigint, usage: CallUsage): bigint;
  /** The call never ran (refused or failed before any work): nothing is charged. */
  release(): void;
}

export interface ReserveRequest {
  accountId: string;
  /** The upper bound of what the call may cost, in micro-units. */
  amount: bigint;
  /** The call may be one of the account's free queries (Elastic model calls). */
  free?: boolean;
  /** The key the call is made with: its spend limit, when it has one, bounds the call too. */
  keyId?: string;
}

/** Why a reservation was refused, with what the 402 says. Amounts in micro-units. */
export type Refusal =
  | {
      ok: false;
      reason: 'balance';
      needed: bigint;
      /** The balance neither held by calls in flight nor owed by settled calls. */
      available: bigint;
      /** Held by calls in flight (on every replica, as last seen). */
      held: bigint;
      /** How long the reservation waited for calls in flight to settle. */
      waitedMs: number;
    }
  | {
      ok: false;
      reason: 'spend_limit';
      keyId: string;
      needed: bigint;
      limit: bigint;
      period: SpendPeriod;
      spent: bigint;
      held: bigint;
      resetsAt: Date;
      waitedMs: number;
    };

export type Reservation = { ok: true; hold: Hold } | Refusal;

/** One refill's answer, and what it asked for (calls that joined it may have wanted more). */
export interface Refill {
  result: SyncResult | undefined;
  askedAccount: boolean;
  askedKey?: string;
  /** The key asked about was unknown here: the write only learned its limit. */
  learned: boolean;
}

/** Settled calls cut for one write: retried as it is until the database confirms it. */
export interface Batch {
  seq: bigint;
  amount: bigint;
  calls: number;
  usage: UsageRow[];
  /** The same calls' charges per line of keys with a spend limit. */
  keys: { allowance: KeyAllowance; charge: KeyCharge }[];
}

export interface AccountState {
  id: string;
  /** `paid` and `freeQueriesUsed` are known (from a lease write or a free-query attempt). */
  known: boolean;
  paid: boolean;
  freeQueriesUsed: number;
  /** When the database last said how many free queries were used (they may be given back). */
  freeCheckedAt: number;
  /** The lease's amount in the database after this replica's last write. */
  lease: bigint;
  /** Monotonic time until which the lease may be spent. */
  deadline: number;
  /** Held by unsettled reservations. */
  reserved: bigint;
  holds: number;
  /** Settled, not yet in a batch. */
  unbatched: bigint;
  calls: number;
  usage: Map<string, UsageRow>;
  /** Written or being written; retried as it is until the database has it. */
  batch?: Batch;
  /** One write at a time per account. */
  writing?: Promise<void>;
  refilling?: Promise<Refill>;
  /** A write that shrinks the lease is in flight: reservations wait for it. */
  shrinking?: Promise<void>;
  /** After a full check found too little: the free balance it saw, trusted until `recheckAt`. */
  knownFree?: bigint;
  recheckAt: number;
  reclaiming?: Promise<void>;
  reclaimPending?: { replicas: Set<string>; done: () => void };
  lastActivity: number;
  /** Micro-units per second, smoothed over flushes. */
  rate: bigint;
  spentSinceFlush: bigint;
  /** Refills since the last flush (the lease ramps up while the rate is unknown). */
  refills: number;
  /** Keys with spend limits (and keys known to have none). */
  keys: KeyAllowances;
  /** The other replicas' slices as the last full check saw them (with knownFree). */
  knownOthers: bigint;
  /** Reservations waiting for a change: a settle, a release, a write, an announcement. */
  waiters: Set<() => void>;
  /** Asked by another replica that is short: what settles and releases is given back until then. */
  returnUntil: number;
  /** A give-back write is scheduled or running (and `returnAgain`: another is due after it). */
  returning: boolean;
  returnAgain: boolean;
}

export function newAccountState(id: string, now: number): AccountState {
  return {
    id,
    known: false,
    paid: false,
    freeQueriesUsed: 0,
    freeCheckedAt: 0,
    lease: 0n,
    deadline: 0,
    reserved: 0n,
    holds: 0,
    unbatched: 0n,
    calls: 0,
    usage: new Map(),
    recheckAt: 0,
    lastActivity: now,
    rate: 0n,
    spentSinceFlush: 0n,
    refills: 0,
    keys: new KeyAllowances(),
    knownOthers: 0n,
    waiters: new Set(),
    returnUntil: 0,
    returning: false,
    returnAgain: false,
  };
}

/** Wakes the reservations waiting on the account (they look again). */
export function changed(s: AccountState): void {
  if (!s.waiters.size) return;
  const waiting = [...s.waiters];
  s.waiters.clear();
  for (const wake of waiting) wake();
}

/** Until the account changes (false) or `ms` pass (true). */
export function nextChange(s: AccountState, ms: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const timer = setTimeout(
      () => {
        s.waiters.delete(wake);
        resolve(true);
      },
      Math.max(0, ms),
    );
    const wake = () => {
      clearTimeout(timer);
      resolve(false);
    };
    s.waiters.add(wake);
  });
}

/** What the lease still offers: lent, less what settled calls owe and what calls in flight hold. */
export const available = (s: AccountState) => s.lease - s.unbatched - (s.batch?.amount ?? 0n) - s.reserved;

/** A reservation of `amount` fits the lease as it stands at `now` (monotonic). */
export const fits = (s: AccountState, amount: bigint, now: number) =>
  !s.shrinking && now < s.deadline && available(s) >= amount;

/** Settled calls this replica has not written yet (in a batch or not). */
export const owed = (s: AccountState) => s.unbatched + (s.batch?.amount ?? 0n);

/**
 * A reservation with `keyId` fits the key's allowance: true when the key has no limit, false when
 * this replica does not know the key yet or its slice is short (or of a period that ended).
 */
export function keyFits(
  s: AccountState,
  keyId: string | undefined,
  amount: bigint,
  wallNow: number,
): boolean {
  if (keyId === undefined) return true;
  const a = s.keys.of(keyId);
  if (a === null) return true;
  return !!a && wallNow < a.periodEndMs && keyAvailable(a) >= amount;
}

/**
 * What this replica would like to hold of the account (./lease-policy.ts). Before the spending rate
 * is known (it is measured at each flush), every refill since the last flush doubles the calls asked
 * for, so a burst costs a few writes, not one per 64 calls.
 */
export const wanted = (s: AccountState, callSize: bigint) =>
  leaseWant({
    callSize,
    ratePerSecond: s.rate,
    horizonMs: LEASE_HORIZON_MS,
    minCalls: LEASE_MIN_CALLS << BigInt(Math.min(s.refills, MAX_RAMP)),
  });
/** At most 64 × 2^6 calls asked for by the ramp. */
const MAX_RAMP = 6;

/** Settled calls not yet written, or a batch not yet confirmed. */
export const pendingWrite = (s: AccountState) => !!s.batch || s.unbatched > 0n || s.usage.size > 0;

export interface HoldContext {
  repo: Pick<BillingRepository, 'giveBackFreeQuery'>;
  logger: Logger;
  monotonic: () => number;
  wallClock: () => number;
  /** A call settled or was released while another replica waits for this account (returnUntil). */
  giveBack(s: AccountState): void;
}

/**
 * A reservation of `amount` on the account (a free query reserves nothing of the lease), and on the
 * allowance of the call's key when it has a spend limit.
 */
export function holdOn(
  ctx: HoldContext,
  s: AccountState,
  amount: bigint,
  free: boolean,
  allowance?: KeyAllowance | null,
): Hold {
  const { monotonic, logger } = ctx;
  let done = false;
  const key = free ? undefined : (allowance ?? undefined);
  s.holds++;
  if (!free) s.reserved += amount;
  if (key) {
    key.reserved += amount;
    key.holds++;
  }
  s.lastActivity = monotonic();
  const after = () => {
    s.lastActivity = monotonic();
    if (s.lastActivity < s.returnUntil) ctx.giveBack(s);
    changed(s);
  };
  return {
    accountId: s.id,
    amount,
    free,
    settle(cost, usage) {
      if (done) return 0n;
      done = true;
      s.holds--;
      let charged = 0n;
      if (!free) {
        s.reserved -= amount;
        // A call that cost more than its bound (an engine that generated past the request's
        // limits) is charged in full: the batch takes what the lease lacks from the account's
        // unleased balance, down to zero and never below (./repository.ts), and this replica
        // reserves nothing more for the account until a refill finds money again.
        charged = cost;
        if (cost > amount)
          logger.warn(
            { account: s.id, reserved: String(amount), cost: String(cost) },
            'a call cost more than its reservation; charged in full',
          );
        s.unbatched += charged;
        s.spentSinceFlush += charged;
        s.calls++; // paid calls: the count in the charge entry's reference
        if (key) {
          key.reserved -= amount;
          key.holds--;
          key.unbatched += charged;
        }
      }
      addUsage(s, usage, charged, free, ctx.wallClock());
      after();
      return charged;
    },
    release() {
      if (done) return;
      done = true;
      s.holds--;
      if (key) {
        key.reserved -= amount;
        key.holds--;
      }
      if (free) {
        s.freeQueriesUsed = Math.max(0, s.freeQueriesUsed - 1);
        ctx.repo
          .giveBackFreeQuery(s.id)
          .catch((err: unknown) =>
            logger.warn({ err: (err as Error).message, account: s.id }, 'could not give back a free query'),
          );
      } else {
        s.reserved -= amount;
      }
      after();
    },
  };
}

/** Adds a settled call to the account's usage of this minute (by key and model). */
function addUsage(s: AccountState, u: CallUsage, cost: bigint, free: boolean, wallClock: number): void {
  const minute = Math.floor(wallClock / 60_000) * 60_000;
  const key = `${u.keyId}\u0000${u.model}\u0000${minute}`;
  const row = s.usage.get(key);
  if (row) {
    row.requests++;
    row.freeRequests += free ? 1 : 0;
    row.promptTokens += u.promptTokens;
    row.completionTokens += u.completionTokens;
    row.cost += cost;
  } else {
    s.usage.set(key, {
      keyId: u.keyId,
      model: u.model,
      periodStart: new Date(minute),
      requests: 1,
      freeRequests: free ? 1 : 0,
      promptTokens: u.promptTokens,
      completionTokens: u.completionTokens,
      cost,
    });
  }
}

/** The batch to write: the one not yet confirmed, else everything settled since (numbered `seq`). */
export function takeBatch(s: AccountState, seq: () => bigint): Batch | undefined {
  if (s.batch) return s.batch;
  if (s.unbatched === 0n && s.usage.size === 0) return undefined;
  s.batch = {
    seq: seq(),
    amount: s.unbatched,
    calls: s.calls,
    usage: [...s.usage.values()],
    keys: s.keys.cut(),
  };
  s.unbatched = 0n;
  s.calls = 0;
  s.usage = new Map();
  return s.batch;
}
