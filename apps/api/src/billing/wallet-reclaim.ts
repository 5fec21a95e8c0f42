// Balance held by other replicas, given back on request. A replica short of balance asks the others
// that hold a lease on the account to give back what they do not use (NOTIFY `reclaim`) and waits a
// little for their answers (BILLING_RECLAIM_WAIT_MS); a replica that is asked shrinks its lease to
// what its calls in flight need and announces it (NOTIFY `available`).
import type { Logger } from 'pino';
import type { BillingEvents } from './notifications.ts';
import type { BillingRepository } from './repository.ts';
import { changed, type AccountState } from './wallet-account.ts';
import { SETTLE_WAIT_MS, type WalletConfig } from './wallet-config.ts';
import type { LeaseWriter } from './wallet-writer.ts';

export interface Reclaimer {
  /** Ask the other holders to give back what they do not use; wait for their answers (bounded). */
  reclaim(s: AccountState, holders: string[]): Promise<void>;
  /**
   * A call settled or was released on an account another replica waits for: give back what it
   * freed (one write at a time; settles meanwhile are carried by the next one).
   */
  giveBack(s: AccountState): void;
}

export function reclaimer(ctx: {
  repo: Pick<BillingRepository, 'requestReclaim'>;
  events: BillingEvents;
  logger: Logger;
  config: Pick<WalletConfig, 'reclaimWaitMs' | 'settleWaitMs'>;
  replica: string;
  monotonic: () => number;
  writer: LeaseWriter;
  /** The wallet's accounts (only those it holds state for answer). */
  accounts: ReadonlyMap<string, AccountState>;
}): Reclaimer {
  const { repo, logger, config, replica, writer } = ctx;
  const settleWaitMs = config.settleWaitMs ?? SETTLE_WAIT_MS;

  const giveBack = (s: AccountState) => {
    if (s.returning) {
      s.returnAgain = true;
      return;
    }
    s.returning = true;
    setImmediate(() => {
      void (async () => {
        try {
          do {
            s.returnAgain = false;
            await writer.shrink(s, 'reclaim', () => writer.stillNeeded(s));
          } while (s.returnAgain && ctx.monotonic() < s.returnUntil && !writer.outage);
        } finally {
          s.returning = false;
        }
      })();
    });
  };

  ctx.events.onMessage((m) => {
    const s = ctx.accounts.get(m.a);
    if (!s) return;
    if (m.t === 'available') {
      if (m.g) s.knownFree = undefined;
      if (m.r && s.reclaimPending?.replicas.delete(m.r) && s.reclaimPending.replicas.size === 0)
        s.reclaimPending.done();
      if (m.g) changed(s);
    } else if (m.t === 'reclaim' && m.r !== replica && (s.lease > 0n || !s.keys.idle)) {
      // What this replica's calls free while the other one waits is given back as they settle.
      s.returnUntil = ctx.monotonic() + settleWaitMs;
      void writer.shrink(s, 'reclaim', () => writer.stillNeeded(s), true);
    }
  });
  ctx.events.onReset(() => {
    for (const s of ctx.accounts.values()) {
      s.knownFree = undefined;
      changed(s);
    }
  });

  return {
    giveBack,
    reclaim: (s, holders) =>
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
      })()),
  };
}
