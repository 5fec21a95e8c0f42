// When this replica looks at Chronos's queues. Nothing polls on a short beat:
//
// - One timer, set to the earliest fire or pre-warm due time this replica knows (./clock.ts's time),
//   runs a fire pass or a pre-warm pass when it rings. A pass returns the next due time it saw (the
//   runs it fired have their next fires, the others their own), so the timer follows the schedule.
//   A run created or changed here sets the timer at once (`schedule`).
// - Every LOOK_MS (5 s) one statement (./queue-repository.ts beat) refreshes the heartbeats of the
//   executions running here, fails those of replicas that stopped beating (a replica killed mid-run:
//   noticed in 10–15 s), and reads the earliest due times and whether executions are queued: due
//   times set on another replica (or left by one that died) reach this one within 5 s, and a
//   NOTIFY that was missed costs at most 5 s. That statement is all an idle replica costs the
//   database: 0.2 transactions a second.
import type { Logger } from 'pino';
import { databaseUnavailable } from '../platform/db-unavailable.ts';
import type { ChronosClock } from './clock.ts';
import { INTERRUPTED } from './execution-job.ts';
import type { Executor } from './executor.ts';
import { earlier, type FirePass } from './fire.ts';
import type { ChronosQueueRepository } from './queue-repository.ts';

/** How often each replica beats (heartbeats, dead replicas, due times set elsewhere). */
export const LOOK_MS = 5_000;
/** A running execution whose heartbeat is older than this lost its replica (two missed beats). */
export const LAPSE_SECONDS = 10;
/** After a pass failed (the database did not answer), try again this much later. */
const RETRY_MS = 1_000;

export interface Scheduler {
  /** A fire or pre-warm is due at these times (a run created or changed on this replica). */
  schedule(fireAt: Date | null, prewarmAt: Date | null): void;
  close(): void;
}

export function scheduler(ctx: {
  clock: ChronosClock;
  repo: Pick<ChronosQueueRepository, 'beat'>;
  fire(): Promise<FirePass>;
  prewarm(): Promise<{ nextPrewarm: Date | null }>;
  executions: Pick<Executor, 'wake' | 'running'>;
  logger: Logger;
  lookMs?: number;
}): Scheduler {
  const { clock, logger } = ctx;
  let nextFire: Date | null = null;
  let nextPrewarm: Date | null = null;
  let timer: { cancel(): void; at: number } | undefined;
  let closed = false;

  const arm = () => {
    const at = earlier(nextFire, nextPrewarm);
    if (closed || !at) return;
    if (timer && timer.at <= at.getTime()) return;
    timer?.cancel();
    const t = clock.after(at.getTime() - clock.now().getTime(), ring);
    timer = { ...t, at: at.getTime() };
  };

  // While the database is unreachable every pass and look fails: that is said once, at warn, and
  // once more when it is back, not every time (other errors are logged each time).
  let down = false;
  const failed = (err: unknown, what: string) => {
    const reason = databaseUnavailable(err);
    if (!reason) return logger.error({ err }, `chronos: ${what} failed; trying again shortly`);
    if (down) return;
    down = true;
    logger.warn({ reason }, 'chronos: the database is unavailable; fires and executions wait for it');
  };
  const succeeded = () => {
    if (!down) return;
    down = false;
    logger.info('chronos reaches the database again');
  };

  /** One pass of a kind at a time; a ring meanwhile runs it once more after. */
  const pass = <T>(run: () => Promise<T>, after: (r: T | undefined, failed: boolean) => void) => {
    let busy = false;
    let rerun = false;
    const go = async (): Promise<void> => {
      if (busy) return void (rerun = true);
      busy = true;
      try {
        const r = await run();
        succeeded();
        after(r, false);
      } catch (err) {
        failed(err, 'a pass');
        after(undefined, true);
      } finally {
        busy = false;
        if (rerun && !closed) {
          rerun = false;
          void go();
        }
      }
    };
    return go;
  };
  const retryAt = () => new Date(clock.now().getTime() + RETRY_MS);
  const firePass = pass(ctx.fire, (r, failed) => {
    if (failed) nextFire = earlier(nextFire, retryAt());
    if (r) {
      nextFire = earlier(nextFire, r.nextFire);
      nextPrewarm = earlier(nextPrewarm, r.nextPrewarm);
      if (r.queued) ctx.executions.wake();
    }
    arm();
  });
  const prewarmPass = pass(ctx.prewarm, (r, failed) => {
    nextPrewarm = earlier(nextPrewarm, failed ? retryAt() : (r?.nextPrewarm ?? null));
    arm();
  });

  function ring() {
    timer = undefined;
    const now = clock.now();
    // A timer may ring a little early against this clock: nothing is due yet, set it again.
    if (nextFire && nextFire <= now) {
      nextFire = null;
      void firePass();
    }
    if (nextPrewarm && nextPrewarm <= now) {
      nextPrewarm = null;
      void prewarmPass();
    }
    arm();
  }

  let beating = false;
  const beat = async () => {
    if (beating || closed) return;
    beating = true;
    try {
      const b = await ctx.repo.beat(ctx.executions.running(), INTERRUPTED, LAPSE_SECONDS);
      succeeded();
      for (const lost of b.lost)
        logger.warn(
          { execution: lost.id, worker: lost.worker },
          'chronos execution interrupted by a dead replica',
        );
      nextFire = earlier(nextFire, b.nextFire);
      nextPrewarm = earlier(nextPrewarm, b.nextPrewarm);
      if (b.queued) ctx.executions.wake();
      arm();
    } catch (err) {
      failed(err, 'the 5 s look');
    } finally {
      beating = false;
    }
  };
  const interval = setInterval(() => void beat(), ctx.lookMs ?? LOOK_MS);
  interval.unref();
  void beat();

  return {
    schedule(fireAt, prewarmAt) {
      nextFire = earlier(nextFire, fireAt);
      nextPrewarm = earlier(nextPrewarm, prewarmAt);
      arm();
    },
    close() {
      closed = true;
      clearInterval(interval);
      timer?.cancel();
    },
  };
}
