// A reservation the lease in memory cannot cover (./wallet.ts answers the others at once): one of an
// unpaid account's free queries, counted in the database; else more of the account (and of the key's
// allowance, when its key has a spend limit) asked for (refill, one request at a time), then what the
// other replicas hold (./wallet-reclaim.ts).
//
// Held is not spent: when the money (or the key's allowance) is short only because calls in flight
// hold it, the reservation waits for them to settle — up to BILLING_SETTLE_WAIT_MS — before it is
// refused. What cannot be paid even if every call in flight cost nothing is refused at once, and a
// full check's finding is trusted from memory for RECHECK_MS (or until an announcement), so an empty
// account costs no write per refused call.
import type { Logger } from 'pino';
import type { BillingRepository } from './repository.ts';
import {
  available,
  fits,
  holdOn,
  keyFits,
  nextChange,
  owed,
  wanted,
  type AccountState,
  type HoldContext,
  type Refill,
  type Refusal,
  type ReserveRequest,
  type Reservation,
} from './wallet-account.ts';
import {
  RECHECK_MS,
  SETTLE_WAIT_MS,
  WAIT_POLL_MS,
  type ReservationPath,
  type WalletConfig,
  type WalletMetrics,
} from './wallet-config.ts';
import { keyAvailable, type KeyAllowance } from './wallet-keys.ts';
import type { Reclaimer } from './wallet-reclaim.ts';
import type { LeaseWriter } from './wallet-writer.ts';

export interface Reservations {
  /** A reservation the lease covers (or one of nothing): held now. */
  accept(s: AccountState, req: ReserveRequest, path: ReservationPath): Reservation;
  /** Everything else: free queries, refill, reclaim, a wait for calls in flight, or 402. */
  slow(s: AccountState, req: ReserveRequest): Promise<Reservation>;
}

const max0 = (v: bigint) => (v > 0n ? v : 0n);

export function reservations(
  ctx: HoldContext & {
    repo: Pick<BillingRepository, 'takeFreeQuery'>;
    logger: Logger;
    config: Pick<WalletConfig, 'freeQueries' | 'settleWaitMs'>;
    metrics?: WalletMetrics;
    writer: LeaseWriter;
    reclaimer: Reclaimer;
    /** The database cannot be reached: the error the call answers (logged once per outage). */
    unavailable(err?: unknown): Error;
  },
): Reservations {
  const { repo, logger, config, monotonic, wallClock } = ctx;
  const settleWaitMs = config.settleWaitMs ?? SETTLE_WAIT_MS;

  const accept: Reservations['accept'] = (s, req, path) => {
    ctx.metrics?.reservation(path, 'ok');
    const allowance = req.keyId === undefined ? null : s.keys.of(req.keyId);
    return { ok: true, hold: holdOn(ctx, s, req.amount, false, allowance) };
  };
  const refuse = (path: ReservationPath, s: AccountState, r: Refusal): Refusal => {
    logger.debug(
      { account: s.id, path, reason: r.reason, needed: String(r.needed), held: String(r.held) },
      'billing reservation refused',
    );
    ctx.metrics?.reservation(path, r.reason === 'balance' ? 'insufficient' : 'spend_limit');
    return r;
  };

  const balanceRefusal = (s: AccountState, needed: bigint, waitedMs: number): Refusal => ({
    ok: false,
    reason: 'balance',
    needed,
    available: max0((s.knownFree ?? 0n) + available(s)),
    held: s.reserved + s.knownOthers,
    waitedMs,
  });
  const keyRefusal = (req: ReserveRequest, a: KeyAllowance, waitedMs: number): Refusal => ({
    ok: false,
    reason: 'spend_limit',
    keyId: req.keyId!,
    needed: req.amount,
    limit: a.limit,
    period: a.period,
    spent: a.spent + a.unbatched + a.batched,
    held: a.reserved + a.othersLeased,
    resetsAt: new Date(a.periodEndMs),
    waitedMs,
  });

  /** After a full check found too little: trusted for RECHECK_MS, or until an announcement. */
  const remember = (s: AccountState, free: bigint, others: bigint) => {
    s.knownFree = free;
    s.knownOthers = others;
    s.recheckAt = monotonic() + RECHECK_MS;
  };

  /**
   * What memory says of a call that does not fit: a refusal (it cannot be paid even if every call in
   * flight cost nothing), `wait` (calls in flight hold what it needs), or undefined (ask the database).
   */
  const judge = (s: AccountState, req: ReserveRequest, waitedMs: number): Refusal | 'wait' | undefined => {
    const now = monotonic();
    let verdict: Refusal | 'wait' = 'wait';
    if (req.keyId !== undefined && !keyFits(s, req.keyId, req.amount, wallClock())) {
      const a = s.keys.of(req.keyId);
      if (!a || now - a.seenAt >= RECHECK_MS || wallClock() >= a.periodEndMs) return undefined;
      const shortfall = req.amount - max0(keyAvailable(a));
      if (req.amount > a.free + a.othersLeased + a.lease - a.unbatched - a.batched)
        return keyRefusal(req, a, waitedMs);
      if (a.free >= shortfall) return undefined;
    }
    if (!fits(s, req.amount, now)) {
      if (s.knownFree === undefined || now >= s.recheckAt || s.shrinking) return undefined;
      if (req.amount > s.knownFree + s.knownOthers + s.lease - owed(s))
        verdict = balanceRefusal(s, req.amount, waitedMs);
      else if (s.knownFree >= req.amount - max0(available(s))) return undefined;
    }
    return verdict;
  };

  /**
   * Asks for more of the account and of the key (one request at a time: calls arriving meanwhile
   * wait for its answer instead of queueing their own, and look again after it).
   */
  const refill = (s: AccountState, req: ReserveRequest): Promise<Refill> => {
    if (s.refilling) return s.refilling;
    const askedAccount = !fits(s, req.amount, monotonic());
    const a = req.keyId === undefined ? null : s.keys.of(req.keyId);
    const askedKey = req.keyId !== undefined && !keyFits(s, req.keyId, req.amount, wallClock());
    if (askedAccount) s.refills++;
    const p = (async (): Promise<Refill> => {
      try {
        const result = await ctx.writer.write(s, 'refill', {
          ...(askedAccount
            ? { grant: { need: req.amount - max0(available(s)), want: wanted(s, req.amount) } }
            : {}),
          // A key this replica does not know yet is only learned: what it lacks is known after.
          ...(askedKey
            ? {
                key: a
                  ? {
                      keyId: req.keyId!,
                      need: req.amount - max0(keyAvailable(a)),
                      want: wanted(s, req.amount),
                    }
                  : { keyId: req.keyId! },
              }
            : {}),
        });
        logger.debug(
          {
            account: s.id,
            granted: String(result?.granted),
            free: String(result?.free),
            lease: String(result?.lease),
            holders: result?.holders.length,
          },
          'billing lease refill',
        );
        return {
          result,
          askedAccount,
          ...(askedKey ? { askedKey: req.keyId! } : {}),
          learned: askedKey && a === undefined,
        };
      } finally {
        s.refilling = undefined;
      }
    })();
    s.refilling = p;
    return p;
  };

  /** An unpaid account's free query, counted in the database (undefined: none for this call). */
  const freeQuery = async (s: AccountState, req: ReserveRequest): Promise<Reservation | undefined> => {
    let r: Awaited<ReturnType<typeof repo.takeFreeQuery>>;
    try {
      r = await repo.takeFreeQuery(s.id, config.freeQueries);
    } catch (err) {
      throw ctx.unavailable(err);
    }
    Object.assign(s, {
      known: r.exists,
      paid: r.paid,
      freeQueriesUsed: r.freeQueriesUsed,
      freeCheckedAt: monotonic(),
    });
    if (r.taken) {
      ctx.metrics?.reservation('free', 'ok');
      return { ok: true, hold: holdOn(ctx, s, req.amount, true) };
    }
    if (!r.exists) return refuse('database', s, balanceRefusal(s, req.amount, 0));
    return undefined;
  };

  const fitsAll = (s: AccountState, req: ReserveRequest) =>
    fits(s, req.amount, monotonic()) && keyFits(s, req.keyId, req.amount, wallClock());

  /** Memory is not to be trusted for this call any more: the next look asks the database. */
  const forget = (s: AccountState, req: ReserveRequest) => {
    s.recheckAt = 0;
    const a = req.keyId === undefined ? null : s.keys.of(req.keyId);
    if (a) a.seenAt = -Infinity;
  };

  const slow: Reservations['slow'] = async (s, req) => {
    // An unpaid account's free queries are counted in the database (one atomic update each); that
    // they are all used is remembered for RECHECK_MS (another replica may give one back).
    const freeLeft =
      !s.known ||
      (!s.paid && (s.freeQueriesUsed < config.freeQueries || monotonic() >= s.freeCheckedAt + RECHECK_MS));
    if (req.free && freeLeft) {
      const free = await freeQuery(s, req);
      if (free) return free;
    }
    const started = monotonic();
    let reclaimed = false;
    // Memory may say "wait" for what another call found; this call asks the database (and the other
    // replicas) once itself before it waits.
    let checked = false;
    for (;;) {
      while (s.shrinking) await s.shrinking;
      if (fitsAll(s, req)) return accept(s, req, 'database');
      let verdict = judge(s, req, monotonic() - started);
      let path: ReservationPath = 'local';
      if (verdict === undefined || (verdict === 'wait' && !checked)) {
        path = 'database';
        const { result, askedAccount, askedKey, learned } = await refill(s, req);
        if (!result) throw ctx.unavailable();
        if (!result.exists) return refuse('database', s, balanceRefusal(s, req.amount, 0));
        if (fitsAll(s, req)) return accept(s, req, 'database');
        if (learned) continue; // the key's limit is known now: ask for what it lacks
        const keyGrant = result.keys.find((k) => k.keyId === askedKey)?.limit?.granted ?? 0n;
        if (result.granted > 0n || keyGrant > 0n) continue; // progress, but calls here took it meanwhile
        if (!reclaimed && result.holders.length) {
          reclaimed = true;
          await ctx.reclaimer.reclaim(s, result.holders);
          continue;
        }
        if (askedAccount) remember(s, result.free, result.othersLeased);
        // It joined a refill that asked for another call's shortfall: look again, asking for its own.
        const keyShort = req.keyId !== undefined && !keyFits(s, req.keyId, req.amount, wallClock());
        if ((!askedAccount && !fits(s, req.amount, monotonic())) || (keyShort && askedKey !== req.keyId))
          continue;
        checked = true;
        verdict = judge(s, req, monotonic() - started) ?? 'wait';
      }
      if (verdict !== 'wait') return refuse(path, s, verdict);
      const waited = monotonic() - started;
      if (waited >= settleWaitMs) {
        const a = req.keyId === undefined ? null : s.keys.of(req.keyId);
        const keyShort = a && !keyFits(s, req.keyId, req.amount, wallClock());
        return refuse(path, s, keyShort ? keyRefusal(req, a, waited) : balanceRefusal(s, req.amount, waited));
      }
      // Calls in flight hold what this one needs: wait for one to settle here, or for another replica
      // to give back what its calls freed (announced); and every WAIT_POLL_MS ask the database again.
      if (await nextChange(s, Math.min(WAIT_POLL_MS, settleWaitMs - waited))) forget(s, req);
    }
  };

  return { accept, slow };
}
