// A fire pass: every run whose next fire has come, taken in batches of up to FIRE_BATCH in one
// transaction each (./queue-repository.ts): each fire records its execution (unique per run and
// occurrence), moves the run to its next occurrence in its time zone and sets when that fire's
// pre-warm is due. Runs another replica is firing are skipped (SKIP LOCKED) and looked at again a
// moment later: if that replica died before committing, its fires are taken over then.
import type { Logger } from 'pino';
import type { Histogram } from 'prom-client';
import { newId } from '../platform/ids.ts';
import type { ChronosClock } from './clock.ts';
import { nextFire, parseCron } from './cron.ts';
import type { ChronosQueueRepository, DueRun, FiredRun } from './queue-repository.ts';
import type { Step } from './steps.ts';

/** Fires recorded in one transaction at most: 1,000 due in the same minute are one batch. */
export const FIRE_BATCH = 1_000;
/** How soon due runs another replica holds are looked at again (its transaction may have died). */
export const RECHECK_MS = 1_000;

/** Next occurrence after `after`, or null when the schedule never fires again. */
export function nextOccurrence(schedule: string, timezone: string, after: Date): Date | null {
  const parsed = parseCron(schedule);
  return parsed.ok ? (nextFire(parsed.spec, timezone, after) ?? null) : null;
}

export interface FirePass {
  /** The earliest time a fire is due again, as far as this pass saw (null: none). */
  nextFire: Date | null;
  /** The earliest pre-warm the recorded fires set (null: none). */
  nextPrewarm: Date | null;
  /** Executions were recorded: the executor has work. */
  queued: boolean;
}

/** The earlier of two times (null: none). */
export const earlier = (a: Date | null, b: Date | null): Date | null => (!a ? b : !b ? a : a < b ? a : b);

export function fireHandler(ctx: {
  repo: Pick<ChronosQueueRepository, 'fire'>;
  clock: ChronosClock;
  /** CHRONOS_ENABLED: when off, occurrences pass without executions. */
  enabled: boolean;
  /** When the pre-warm of the fire `at` is due for these steps (null: none). */
  prewarmAt(steps: readonly Step[], at: Date): Date | null;
  delay: Pick<Histogram, 'observe'>;
  logger: Logger;
}): () => Promise<FirePass> {
  const { repo, clock, logger } = ctx;
  const plan = (run: DueRun) => {
    let next: Date | null = null;
    try {
      // Missed fires (no replica ran at the time): this one runs once, late; the occurrences
      // between it and now are skipped, and the schedule continues from now.
      next = nextOccurrence(
        run.schedule,
        run.timezone,
        new Date(Math.max(run.at.getTime(), clock.now().getTime())),
      );
    } catch (err) {
      // A schedule this runtime cannot read any more (a time zone gone from its data): the run rests
      // rather than holding up every other fire.
      logger.error({ err, run: run.id }, 'chronos: cannot compute the next fire; the run rests');
    }
    return {
      next,
      prewarmAt: next ? ctx.prewarmAt(run.steps, next) : null,
      // Turned off platform-wide: occurrences pass without executions (the schedule keeps going).
      executionId: ctx.enabled ? newId('chx') : null,
    };
  };
  return async () => {
    const pass: FirePass = { nextFire: null, nextPrewarm: null, queued: false };
    for (;;) {
      const now = clock.now();
      const batch = await repo.fire(now, FIRE_BATCH, plan);
      const committed = clock.now().getTime();
      for (const f of batch.fired) {
        ctx.delay.observe(Math.max(0, committed - f.run.at.getTime()) / 1000);
        pass.nextFire = earlier(pass.nextFire, f.next);
        pass.nextPrewarm = earlier(pass.nextPrewarm, f.prewarmAt);
        log(logger, f, batch.recorded);
      }
      pass.queued ||= batch.recorded.size > 0;
      pass.nextFire = earlier(pass.nextFire, batch.nextDue);
      if (batch.fired.length === FIRE_BATCH) continue; // more may be due
      if (batch.othersDue) pass.nextFire = earlier(pass.nextFire, new Date(now.getTime() + RECHECK_MS));
      return pass;
    }
  };
}

function log(logger: Logger, f: FiredRun, recorded: ReadonlySet<string>) {
  logger.debug(
    {
      run: f.run.id,
      at: f.run.at.toISOString(),
      execution: f.executionId && recorded.has(f.executionId) ? f.executionId : null,
      next: f.next,
    },
    'chronos fire',
  );
}
