// The wallet's writes (./wallet.ts): one at a time per account, each carrying the settled calls as
// one batch and renewing, growing or shrinking this replica's lease; the account's state then follows
// what the database says. A write that may shrink the lease holds reservations until it is done.
import type { Logger } from 'pino';
import { databaseUnavailable } from '../platform/db-unavailable.ts';
import type { AccountState } from './wallet-account.ts';
import { changed, takeBatch } from './wallet-account.ts';
import { DEADLINE_MARGIN_MS, type SyncKind, type WalletConfig, type WalletMetrics } from './wallet-config.ts';
import type { BillingRepository } from './repository.ts';
import type { KeyOp } from './key-lease-repository.ts';
import type { SyncResult, SyncRequest } from './lease-repository.ts';

export type WriteRequest = Omit<SyncRequest, 'accountId' | 'replica' | 'ttlMs' | 'batch' | 'keys'> & {
  withBatch?: boolean;
  /** One key to learn, lend more of (`need`, `want`) or shrink to what it holds (`keep`). */
  key?: { keyId: string; need?: bigint; want?: bigint; keep?: boolean };
  /** Shrink every key slice to what it holds (a reclaim, a return). */
  keepKeys?: boolean;
};

export interface LeaseWriter {
  /** One write of this replica's lease on the account; undefined when it failed (retried later). */
  write(s: AccountState, kind: SyncKind, req: WriteRequest): Promise<SyncResult | undefined>;
  /** A write that may shrink the lease: reservations wait until it is done. */
  shrink(
    s: AccountState,
    kind: SyncKind,
    keep: () => bigint,
    announce?: boolean,
  ): Promise<SyncResult | undefined>;
  /**
   * What a shrinking write must leave in the lease: what calls in flight hold, and settled calls the
   * write does not carry (it carries them all as its batch unless an earlier batch is unconfirmed).
   */
  stillNeeded(s: AccountState): bigint;
  /** The database could not be reached by the last write (logged once per outage). */
  readonly outage: boolean;
  /** Another billing query could not reach the database (counted as a failed write), or could. */
  unreachable(err: unknown, what: string): void;
  reached(): void;
}

export function leaseWriter(ctx: {
  repo: Pick<BillingRepository, 'sync'>;
  logger: Logger;
  config: Pick<WalletConfig, 'leaseTtlMs'>;
  metrics?: WalletMetrics;
  monotonic: () => number;
  replica: string;
  /** The next batch number: one increasing sequence for the whole wallet (see ./wallet.ts). */
  nextSeq: () => bigint;
}): LeaseWriter {
  const { repo, logger, config, monotonic, replica } = ctx;
  // Failed writes since the database was last reached: one error when an outage begins, one line
  // when it ends, nothing per write (or per call) in between.
  let failures = 0;
  const failed = (err: unknown, account: string, kind: string) => {
    if (!databaseUnavailable(err)) {
      // Not an outage: a bug or a refused write, worth a line each time.
      logger.error({ err, account, kind }, 'billing write failed; will retry');
      return;
    }
    if (failures++ === 0)
      logger.error(
        { err: (err as Error)?.message, account, kind },
        'billing cannot reach the database: calls beyond what the leases hold answer 503 until it is back (logged once per outage)',
      );
  };
  const reached = () => {
    if (failures === 0) return;
    logger.info({ failedWrites: failures }, 'billing reaches the database again');
    failures = 0;
  };

  const keyOps = (s: AccountState, req: WriteRequest): KeyOp[] => {
    const ops = s.keys.ops(req.key);
    if (!req.keepKeys) return ops;
    const keeps = new Map(s.keys.keeps().map((k) => [k.keyId, k.keep]));
    return ops.map((o) => (keeps.has(o.keyId) ? { ...o, keep: keeps.get(o.keyId)! } : o));
  };

  const write: LeaseWriter['write'] = (s, kind, req) => {
    const run = async (): Promise<SyncResult | undefined> => {
      const batch = req.withBatch === false ? undefined : takeBatch(s, ctx.nextSeq);
      const started = monotonic();
      const keys = keyOps(s, req);
      try {
        const result = await repo.sync({
          accountId: s.id,
          replica,
          ttlMs: config.leaseTtlMs,
          ...(batch ? { batch: { ...batch, keys: batch.keys.map((k) => k.charge) } } : {}),
          ...(req.grant ? { grant: req.grant } : {}),
          ...(req.keep !== undefined ? { keep: req.keep } : {}),
          ...(req.announce ? { announce: true } : {}),
          ...(keys.length ? { keys } : {}),
        });
        if (batch && s.batch === batch) {
          s.batch = undefined;
          s.keys.confirm(batch.keys);
        }
        s.keys.apply(result.keys, monotonic());
        s.lease = result.lease;
        // What a full check remembered moves with every write (a top-up takes from the free part).
        if (s.knownFree !== undefined) s.knownFree = result.free;
        s.deadline = result.lease > 0n ? started + config.leaseTtlMs - DEADLINE_MARGIN_MS : 0;
        s.known = result.exists;
        s.paid = result.paid;
        s.freeQueriesUsed = result.freeQueriesUsed;
        if (result.uncollected > 0n) {
          ctx.metrics?.uncollected(result.uncollected);
          logger.error(
            { account: s.id, uncollected: String(result.uncollected) },
            'settled calls exceeded both the lease and the free balance; the rest was not charged',
          );
        }
        ctx.metrics?.sync(kind, 'ok');
        reached();
        changed(s);
        return result;
      } catch (err) {
        ctx.metrics?.sync(kind, 'error');
        failed(err, s.id, kind);
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

  const shrink: LeaseWriter['shrink'] = (s, kind, keep, announce = false) => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    s.shrinking = gate;
    const p = (async () => {
      // Wait for writes already queued, then decide how much to keep with the state as it is then.
      while (s.writing) await s.writing;
      return write(s, kind, { keep: keep(), announce, keepKeys: true });
    })();
    return p.finally(() => {
      if (s.shrinking === gate) s.shrinking = undefined;
      release();
    });
  };

  return {
    write,
    shrink,
    stillNeeded: (s) => s.reserved + (s.batch ? s.unbatched : 0n),
    get outage() {
      return failures > 0;
    },
    unreachable: (err, what) => failed(err, '', what),
    reached,
  };
}
