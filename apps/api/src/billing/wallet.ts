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
// Small balances: a lease is at most what the replica needs plus half of what remains (see
// lease-policy.ts), and a replica that falls short asks the others to give back what they are not
// using (NOTIFY `reclaim`) before answering 402 — money is only ever unavailable because calls in
// flight hold it, or because a dead replica's lease has not expired yet (BILLING_LEASE_TTL_MS).
// After such a full check found too little, the replica answers 402 from memory for calls that
// need more than what it saw (for at most RECHECK_MS, or until a NOTIFY `available` says the
// account's free balance grew), so an empty account costs no write per refused call.
//
// Crash semantics: a replica that is killed loses the calls it settled since its last flush (at most
// BILLING_FLUSH_INTERVAL_MS of charges and usage: the account is under-charged, never over-charged),
// and its lease returns to the account when it expires. SIGTERM flushes everything and gives leases
// back. A replica cut off from the database keeps spending its lease only until the lease's expiry
// (measured from before the write that granted it, so earlier than the database's own), then
// answers from the database or fails.
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { leaseWant } from './lease-policy.ts';
import type { BillingEvents } from './notifications.ts';
import type { BillingRepository, SyncRequest, SyncResult, UsageRow } from './repository.ts';

export interface WalletConfig {
  flushIntervalMs: number;
  leaseTtlMs: number;
  /** Free Elastic queries of an account that was never credited. */
  freeQueries: number;
  /** How long a replica that is short waits for the others to give back their unused slices. */
  reclaimWaitMs: number;
}

export type ReservationPath = 'local' | 'database' | 'free';
export type SyncKind = 'refill' | 'flush' | 'renew' | 'return' | 'reclaim';

export interface WalletMetrics {
  reservation(path: ReservationPath, outcome: 'ok' | 'insufficient'): void;
  sync(kind: SyncKind, outcome: 'ok' | 'error'): void;
  uncollected(units: bigint): void;
}

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

export interface ReserveRequest {
  accountId: string;
  /** The upper bound of what the call may cost, in micro-units. */
  amount: bigint;
  /** The call may be one of the account's free queries (Elastic model calls). */
  free?: boolean;
}

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
   * The call ran: charge `cost` (normally at most `amount`) and record its usage. Returns what was
   * charged. A second settle or a release after it does nothing.
   */
  settle(cost: bigint, usage: CallUsage): bigint;
  /** The call never ran (refused or failed before any work): nothing is charged. */
  release(): void;
}

export type Reservation = { ok: true; hold: Hold } | { ok: false };

export interface Wallet {
  readonly replica: string;
  reserve(req: ReserveRequest): Promise<Reservation>;
  /** Writes every settled call now (tests, shutdown). */
  flush(): Promise<void>;
  /** Flushes and gives every lease back. */
  close(): Promise<void>;
}

interface Batch {
  seq: bigint;
  amount: bigint;
  calls: number;
  usage: UsageRow[];
}

interface AccountState {
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
  refilling?: Promise<SyncResult | undefined>;
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
}

/** Renew a lease with calls in flight once less than this part of its ttl is left. */
const RENEW_FRACTION = 0.5;
/** Time a lease spends before its database expiry: writes take time, clocks tick differently. */
const DEADLINE_MARGIN_MS = 1_000;
/** Lease sizing: enough for this long at the recent rate, and at least this many calls. */
const LEASE_HORIZON_MS = 10_000;
const LEASE_MIN_CALLS = 64n;
/** How long a 402 found by a full check (refill and reclaim) is repeated from memory. */
const RECHECK_MS = 1_000;

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

  const state = (id: string): AccountState => {
    let s = accounts.get(id);
    if (!s) {
      s = {
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
        lastActivity: monotonic(),
        rate: 0n,
        spentSinceFlush: 0n,
      };
      accounts.set(id, s);
    }
    return s;
  };

  const available = (s: AccountState) => s.lease - s.unbatched - (s.batch?.amount ?? 0n) - s.reserved;
  const fits = (s: AccountState, amount: bigint) =>
    !s.shrinking && monotonic() < s.deadline && available(s) >= amount;

  const hold = (s: AccountState, amount: bigint, free: boolean): Hold => {
    let done = false;
    s.holds++;
    if (!free) s.reserved += amount;
    s.lastActivity = monotonic();
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
          // A bound that was too low is charged up to what the lease has left, never beyond.
          const room = available(s);
          charged = cost <= amount ? cost : cost <= room ? cost : room > amount ? room : amount;
          if (charged < cost) {
            deps.metrics?.uncollected(cost - charged);
            logger.warn(
              { account: s.id, reserved: String(amount), cost: String(cost) },
              'a call cost more than its reservation; charged what the lease covers',
            );
          }
          s.unbatched += charged;
          s.spentSinceFlush += charged;
          s.calls++; // paid calls: the count in the charge entry's reference
        }
        addUsage(s, usage, charged, free);
        s.lastActivity = monotonic();
        return charged;
      },
      release() {
        if (done) return;
        done = true;
        s.holds--;
        s.lastActivity = monotonic();
        if (free) {
          s.freeQueriesUsed = Math.max(0, s.freeQueriesUsed - 1);
          repo
            .giveBackFreeQuery(s.id)
            .catch((err: unknown) =>
              logger.warn({ err: (err as Error).message, account: s.id }, 'could not give back a free query'),
            );
        } else {
          s.reserved -= amount;
        }
      },
    };
  };

  const addUsage = (s: AccountState, u: CallUsage, cost: bigint, free: boolean) => {
    const minute = Math.floor(wallClock() / 60_000) * 60_000;
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
  };

  /** The batch to write: the one not yet confirmed, else everything settled since. */
  const takeBatch = (s: AccountState): Batch | undefined => {
    if (s.batch) return s.batch;
    if (s.unbatched === 0n && s.usage.size === 0) return undefined;
    s.batch = { seq: ++lastSeq, amount: s.unbatched, calls: s.calls, usage: [...s.usage.values()] };
    s.unbatched = 0n;
    s.calls = 0;
    s.usage = new Map();
    return s.batch;
  };

  /** One write of this replica's lease on the account; the state follows what the database says. */
  const write = (
    s: AccountState,
    kind: SyncKind,
    req: Omit<SyncRequest, 'accountId' | 'replica' | 'ttlMs' | 'batch'> & { withBatch?: boolean },
  ): Promise<SyncResult | undefined> => {
    const run = async (): Promise<SyncResult | undefined> => {
      const batch = req.withBatch === false ? undefined : takeBatch(s);
      const started = monotonic();
      try {
        const result = await repo.sync({
          accountId: s.id,
          replica,
          ttlMs: config.leaseTtlMs,
          ...(batch ? { batch } : {}),
          ...(req.grant ? { grant: req.grant } : {}),
          ...(req.keep !== undefined ? { keep: req.keep } : {}),
          ...(req.announce ? { announce: true } : {}),
        });
        if (batch && s.batch === batch) s.batch = undefined;
        s.lease = result.lease;
        s.deadline = result.lease > 0n ? started + config.leaseTtlMs - DEADLINE_MARGIN_MS : 0;
        s.known = result.exists;
        s.paid = result.paid;
        s.freeQueriesUsed = result.freeQueriesUsed;
        if (result.uncollected > 0n) {
          deps.metrics?.uncollected(result.uncollected);
          logger.error(
            { account: s.id, uncollected: String(result.uncollected) },
            'settled calls exceeded both the lease and the free balance; the rest was not charged',
          );
        }
        deps.metrics?.sync(kind, 'ok');
        return result;
      } catch (err) {
        deps.metrics?.sync(kind, 'error');
        logger.warn({ err: (err as Error).message, account: s.id, kind }, 'billing write failed; will retry');
        return undefined;
      }
    };
    // Writes of one account are serial: a batch must be confirmed before the next one is cut.
    const previous = s.writing ?? Promise.resolve();
    const p = previous.then(run);
    const tail = p.then(() => undefined);
    s.writing = tail;
    void tail.then(() => {
      if (s.writing === tail) s.writing = undefined;
    });
    return p;
  };

  /** A write that may shrink the lease: reservations wait until it is done. */
  const shrink = (
    s: AccountState,
    kind: SyncKind,
    keep: () => bigint,
    announce = false,
  ): Promise<SyncResult | undefined> => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    s.shrinking = gate;
    const p = (async () => {
      // Wait for writes already queued, then decide how much to keep with the state as it is then.
      while (s.writing) await s.writing;
      return write(s, kind, { keep: keep(), announce });
    })();
    return p.finally(() => {
      if (s.shrinking === gate) s.shrinking = undefined;
      release();
    });
  };

  /**
   * What a shrinking write must leave in the lease: what calls in flight hold, and settled calls the
   * write does not carry (it carries them all as its batch unless an earlier batch is unconfirmed).
   */
  const stillNeeded = (s: AccountState) => s.reserved + (s.batch ? s.unbatched : 0n);

  const want = (s: AccountState, callSize: bigint) =>
    leaseWant({ callSize, ratePerSecond: s.rate, horizonMs: LEASE_HORIZON_MS, minCalls: LEASE_MIN_CALLS });

  /** Ask the other holders to give back what they do not use; wait for their answers (bounded). */
  const reclaim = (s: AccountState, holders: string[]): Promise<void> =>
    (s.reclaiming ??= (async () => {
      const replicas = new Set(holders);
      const answered = new Promise<void>((resolve) => {
        s.reclaimPending = { replicas, done: resolve };
      });
      try {
        await repo.requestReclaim(s.id, replica);
        const timer = new Promise<void>((r) => setTimeout(r, config.reclaimWaitMs).unref());
        await Promise.race([answered, timer]);
      } catch (err) {
        logger.warn(
          { err: (err as Error).message, account: s.id },
          'could not ask other replicas for balance',
        );
      } finally {
        s.reclaimPending = undefined;
        s.reclaiming = undefined;
      }
    })());

  const slowReserve = async (s: AccountState, req: ReserveRequest): Promise<Reservation> => {
    // An unpaid account's free queries are counted in the database (one atomic update each); that
    // they are all used is remembered for RECHECK_MS (another replica may give one back).
    const freeLeft =
      !s.known ||
      (!s.paid && (s.freeQueriesUsed < config.freeQueries || monotonic() >= s.freeCheckedAt + RECHECK_MS));
    if (req.free && freeLeft) {
      const r = await repo.takeFreeQuery(s.id, config.freeQueries);
      Object.assign(s, {
        known: r.exists,
        paid: r.paid,
        freeQueriesUsed: r.freeQueriesUsed,
        freeCheckedAt: monotonic(),
      });
      if (r.taken) {
        deps.metrics?.reservation('free', 'ok');
        return { ok: true, hold: hold(s, req.amount, true) };
      }
      if (!r.exists) return refuse('database');
    }
    let reclaimed = false;
    for (;;) {
      while (s.shrinking) await s.shrinking;
      if (fits(s, req.amount)) return accept(s, req, 'database');
      const shortfall = req.amount - max0(available(s));
      if (s.knownFree !== undefined && monotonic() < s.recheckAt && shortfall > s.knownFree)
        return refuse('local', s);
      const result = await refill(s, shortfall, req.amount);
      if (!result) throw new Error('billing: the database could not be reached to reserve the call');
      if (!result.exists) return refuse('database');
      if (fits(s, req.amount)) return accept(s, req, 'database');
      if (result.granted > 0n) continue; // progress, but calls here took it meanwhile: again
      if (!reclaimed && result.holders.length) {
        reclaimed = true;
        await reclaim(s, result.holders);
        continue;
      }
      remember(s, result.free);
      return refuse('database', s);
    }
  };

  /** After a full check found too little: answer 402 from memory for a while (see RECHECK_MS). */
  const remember = (s: AccountState, free: bigint) => {
    s.knownFree = free;
    s.recheckAt = monotonic() + RECHECK_MS;
  };

  /**
   * Asks for more of the account (one request at a time: calls arriving meanwhile wait for its
   * answer instead of queueing their own). A grant of nothing with no other holder to ask is
   * remembered before anyone waiting sees the answer.
   */
  const refill = (s: AccountState, shortfall: bigint, callSize: bigint) =>
    (s.refilling ??= (async () => {
      try {
        const result = await write(s, 'refill', { grant: { need: shortfall, want: want(s, callSize) } });
        logger.debug(
          {
            account: s.id,
            need: String(shortfall),
            granted: String(result?.granted),
            free: String(result?.free),
            lease: String(result?.lease),
            holders: result?.holders.length,
          },
          'billing lease refill',
        );
        if (result?.exists && result.granted === 0n && !result.holders.length) remember(s, result.free);
        return result;
      } finally {
        s.refilling = undefined;
      }
    })());

  const accept = (s: AccountState, req: ReserveRequest, path: ReservationPath): Reservation => {
    deps.metrics?.reservation(path, 'ok');
    return { ok: true, hold: hold(s, req.amount, false) };
  };
  const refuse = (path: ReservationPath, s?: AccountState): Reservation => {
    logger.debug({ account: s?.id, path, knownFree: String(s?.knownFree) }, 'billing reservation refused');
    deps.metrics?.reservation(path, 'insufficient');
    return { ok: false };
  };

  deps.events.onMessage((m) => {
    const s = accounts.get(m.a);
    if (!s) return;
    if (m.t === 'available') {
      if (m.g) s.knownFree = undefined;
      if (m.r && s.reclaimPending?.replicas.delete(m.r) && s.reclaimPending.replicas.size === 0)
        s.reclaimPending.done();
    } else if (m.t === 'reclaim' && m.r !== replica && s.lease > 0n) {
      void shrink(s, 'reclaim', () => stillNeeded(s), true);
    }
  });
  deps.events.onReset(() => {
    for (const s of accounts.values()) s.knownFree = undefined;
  });

  const tick = async () => {
    const now = monotonic();
    const jobs: Promise<unknown>[] = [];
    for (const s of accounts.values()) {
      if (s.writing || s.shrinking) continue;
      // Smoothed spending rate, for lease sizing.
      const perSecond = (s.spentSinceFlush * 1000n) / BigInt(Math.max(1, Math.round(config.flushIntervalMs)));
      s.rate = (s.rate * 3n + perSecond) / 4n;
      s.spentSinceFlush = 0n;
      const pending = s.batch || s.unbatched > 0n || s.usage.size > 0;
      const idle = s.holds === 0 && now - s.lastActivity >= idleMs;
      if (idle && s.lease > 0n) {
        jobs.push(shrink(s, 'return', () => stillNeeded(s)));
      } else if (pending) {
        const low = available(s) < want(s, 0n) / 4n || s.lease === 0n;
        const topUp = s.lease > 0n && low && s.rate > 0n ? { grant: { need: 0n, want: want(s, 0n) } } : {};
        jobs.push(write(s, 'flush', topUp));
      } else if (s.lease > 0n && s.deadline - now < config.leaseTtlMs * RENEW_FRACTION) {
        jobs.push(write(s, 'renew', {}));
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
    reserve(req) {
      if (closed) return Promise.reject(new Error('billing: the wallet is closed'));
      const s = state(req.accountId);
      if (req.amount <= 0n) return Promise.resolve(accept(s, { ...req, amount: 0n }, 'local'));
      if (s.known && (s.paid || !req.free) && fits(s, req.amount))
        return Promise.resolve(accept(s, req, 'local'));
      return slowReserve(s, req);
    },
    async flush() {
      await Promise.all(
        [...accounts.values()].map(async (s) => {
          while (s.writing) await s.writing;
          if (s.batch || s.unbatched > 0n || s.usage.size > 0) await write(s, 'flush', {});
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
            const pending = s.batch || s.unbatched > 0n || s.usage.size > 0;
            if (!pending && s.lease === 0n) break;
            if (!(await write(s, 'return', { keep: stillNeeded(s) }))) break;
          }
        }),
      );
    },
  };
}

function max0(v: bigint): bigint {
  return v > 0n ? v : 0n;
}
