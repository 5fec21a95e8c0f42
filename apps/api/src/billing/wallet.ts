// The hot path of prepaid billing: reserve an upper bound before a call is forwarded, settle it to
// the exact cost after, release it if the call never ran. In the common case none of this touches
// the database.
//
// Each API replica (one Wallet) borrows a slice of an account's balance — a lease, recorded in the
// database and counted in billing_accounts.leased, which a CHECK keeps within the balance — and
// reserves calls against it in memory. Settled calls are written in batches, one transaction per
// account per flush (one charge entry, the usage sums, the lease renewed and topped up). So the
// balance cannot go below zero whatever the number of replicas: a replica only spends what it was
// lent, and the database lends no more than the balance holds.
//
// Small balances: a lease is at most what the replica needs plus half of what remains (see lease-policy.ts),
// and a replica that falls short asks the others to give back what they are not using (NOTIFY `reclaim`,
// ./wallet-reclaim.ts) before answering 402 — money is only ever unavailable because calls in flight hold it,
// or because a dead replica's lease has not expired yet (BILLING_LEASE_TTL_MS). After such a full check found
// too little, the replica answers 402 from memory for calls that need more than what it saw (for at most
// RECHECK_MS, or until a NOTIFY `available` says the account's free balance grew), so an empty account costs
// no write per refused call.
//
// Crash semantics: a replica that is killed loses the calls it settled since its last flush (at most
// BILLING_FLUSH_INTERVAL_MS of charges and usage: the account is under-charged, never over-charged),
// and its lease returns to the account when it expires. SIGTERM flushes everything and gives leases
// back. A replica cut off from the database keeps spending its lease only until the lease's expiry
// (measured from before the write that granted it, so earlier than the database's own), then
// answers from the database or fails.
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { databaseUnavailable } from '../platform/db-unavailable.ts';
import { ApiError } from '../platform/errors.ts';
import type { BillingEvents } from './notifications.ts';
import type { BillingRepository } from './repository.ts';
import {
  available,
  changed,
  fits,
  keyFits,
  newAccountState,
  pendingWrite,
  wanted,
  type AccountState,
  type Reservation,
  type ReserveRequest,
} from './wallet-account.ts';
import { RENEW_FRACTION, type WalletConfig, type WalletMetrics } from './wallet-config.ts';
import { reclaimer } from './wallet-reclaim.ts';
import { reservations } from './wallet-reserve.ts';
import { leaseWriter } from './wallet-writer.ts';

export type { CallUsage, Hold, Refusal, Reservation, ReserveRequest } from './wallet-account.ts';
export type { ReservationPath, SyncKind, WalletConfig, WalletMetrics } from './wallet-config.ts';

export interface WalletDeps {
  repo: Pick<BillingRepository, 'sync' | 'takeFreeQuery' | 'giveBackFreeQuery' | 'requestReclaim'>;
  events: BillingEvents;
  logger: Logger;
  config: WalletConfig;
  metrics?: WalletMetrics;
  /** A monotonic clock in milliseconds (lease deadlines). */
  monotonic?: () => number;
  /** Wall-clock milliseconds (the minute usage is recorded under). */
  wallClock?: () => number;
  replica?: string;
}

export interface Wallet {
  readonly replica: string;
  /** BERTH_CURRENCY, named in 402 details (undefined in tests that do not set it). */
  readonly currency?: string;
  /**
   * Reserves the call's upper bound; a refusal says why (balance or the key's spend limit) and what
   * calls in flight hold. Throws a 503 ApiError when the database is needed and cannot be reached.
   */
  reserve(req: ReserveRequest): Promise<Reservation>;
  /**
   * A key's spend limit changed (on any replica): the next reservation with it reads it again; with
   * no key, every key's (a change may have been missed).
   */
  keyChanged(keyId?: string): void;
  /**
   * The account's balance grew through this replica (a credit, refund or positive adjustment): the
   * next reservation reads it again instead of trusting an earlier 402. Other replicas learn it from
   * the NOTIFY `available` the same write sent; this one must not wait for its own notification to
   * come back (a top-up answered 201 and then a 402 for the next call).
   */
  balanceGrew(accountId: string): void;
  /** Writes every settled call now (tests, shutdown). */
  flush(): Promise<void>;
  /** Flushes and gives every lease back. */
  close(): Promise<void>;
}

export function createWallet(deps: WalletDeps): Wallet {
  const { repo, logger, config } = deps;
  const monotonic = deps.monotonic ?? (() => performance.now());
  const wallClock = deps.wallClock ?? Date.now;
  const replica = deps.replica ?? randomBytes(6).toString('hex');
  const accounts = new Map<string, AccountState>();
  const idleMs = Math.max(config.leaseTtlMs / 3, config.flushIntervalMs * 2);
  // Batch numbers, one sequence for the whole wallet. The database applies a batch of an account
  // only if its number is above the last one it applied for this replica (a retried batch is not
  // charged twice), and that row outlives the account's state here, which is dropped when idle: a
  // per-state counter restarting at 1 would have the next batches taken for replays, their charges
  // and usage silently dropped. Starting from the wall clock keeps the numbers increasing for a
  // wallet that reuses another's replica id, too.
  let lastSeq = BigInt(wallClock()) * 1000n;
  let closed = false;
  const { metrics } = deps;
  const writer = leaseWriter({
    repo,
    logger,
    config,
    monotonic,
    replica,
    nextSeq: () => ++lastSeq,
    metrics,
  });
  const reclaim = reclaimer({
    repo,
    events: deps.events,
    logger,
    config,
    replica,
    writer,
    accounts,
    monotonic,
  });
  /** The answer to a call that needs the database while it cannot be reached: 503, the SDKs retry. */
  const unavailable = (err?: unknown): Error => {
    if (err !== undefined) {
      if (!databaseUnavailable(err)) return err as Error;
      writer.unreachable(err, 'free query');
    }
    return new ApiError('service_unavailable', { headers: { 'retry-after': '5' } });
  };
  const reserving = reservations({
    repo,
    logger,
    config,
    monotonic,
    wallClock,
    writer,
    reclaimer: reclaim,
    metrics,
    unavailable,
    giveBack: (s) => reclaim.giveBack(s),
  });

  const state = (id: string): AccountState => {
    let s = accounts.get(id);
    if (!s) accounts.set(id, (s = newAccountState(id, monotonic())));
    return s;
  };

  /** Every flush interval: spending rates, then per account one write, a renewal, or forgetting it. */
  const tick = async () => {
    const now = monotonic();
    const jobs: Promise<unknown>[] = [];
    for (const s of accounts.values()) {
      if (s.writing || s.shrinking) continue;
      // Smoothed spending rate, for lease sizing.
      const perSecond = (s.spentSinceFlush * 1000n) / BigInt(Math.max(1, Math.round(config.flushIntervalMs)));
      s.rate = (s.rate * 3n + perSecond) / 4n;
      s.spentSinceFlush = 0n;
      s.refills = 0;
      const idle = s.holds === 0 && now - s.lastActivity >= idleMs;
      if (idle && (s.lease > 0n || !s.keys.idle)) {
        jobs.push(writer.shrink(s, 'return', () => writer.stillNeeded(s)));
      } else if (pendingWrite(s)) {
        const low = available(s) < wanted(s, 0n) / 4n || s.lease === 0n;
        const topUp = s.lease > 0n && low && s.rate > 0n ? { grant: { need: 0n, want: wanted(s, 0n) } } : {};
        jobs.push(writer.write(s, 'flush', topUp));
      } else if ((s.lease > 0n || !s.keys.idle) && s.deadline - now < config.leaseTtlMs * RENEW_FRACTION) {
        jobs.push(writer.write(s, 'renew', {}));
      } else if (idle && s.lease === 0n && !s.reclaiming) {
        accounts.delete(s.id);
      }
    }
    await Promise.all(jobs);
  };
  const timer = setInterval(() => void tick(), config.flushIntervalMs);
  timer.unref();

  return {
    replica,
    ...(config.currency ? { currency: config.currency } : {}),
    reserve(req) {
      if (closed) return Promise.reject(new Error('billing: the wallet is closed'));
      const s = state(req.accountId);
      if (req.amount <= 0n) return Promise.resolve(reserving.accept(s, { ...req, amount: 0n }, 'local'));
      if (
        s.known &&
        (s.paid || !req.free) &&
        fits(s, req.amount, monotonic()) &&
        keyFits(s, req.keyId, req.amount, wallClock())
      )
        return Promise.resolve(reserving.accept(s, req, 'local'));
      return reserving.slow(s, req);
    },
    keyChanged(keyId) {
      for (const s of accounts.values()) if (s.keys.forget(keyId)) s.knownFree = undefined;
    },
    balanceGrew(accountId) {
      const s = accounts.get(accountId);
      if (!s) return;
      s.knownFree = undefined;
      changed(s);
    },
    async flush() {
      await Promise.all(
        [...accounts.values()].map(async (s) => {
          while (s.writing) await s.writing;
          if (pendingWrite(s)) await writer.write(s, 'flush', {});
        }),
      );
    },
    async close() {
      if (closed) return;
      closed = true;
      clearInterval(timer);
      const abandoned = [...accounts.values()].reduce((n, s) => n + s.holds, 0);
      if (abandoned) logger.warn({ holds: abandoned }, 'billing closed with calls still reserved');
      await Promise.all(
        [...accounts.values()].map(async (s) => {
          // Two writes at most: an unconfirmed batch first, then what was settled after it.
          for (let i = 0; i < 2; i++) {
            while (s.writing) await s.writing;
            if (!pendingWrite(s) && s.lease === 0n && s.keys.idle) break;
            if (!(await writer.write(s, 'return', { keep: writer.stillNeeded(s), keepKeys: true }))) break;
          }
        }),
      );
    },
  };
}
