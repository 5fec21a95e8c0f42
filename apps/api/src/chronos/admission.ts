// A manual trigger's admission: the run fee and what step 0 may cost are reserved before the trigger
// answers (402 otherwise) and kept until the execution starts, so triggers at once cannot accept more
// work than the balance can start. On this replica the execution takes the reservation over
// (./execution-job.ts); when another replica claims the execution, it is released once that is seen
// here (polled every second). A first step on `auto` is chosen here, once, and handed to the
// execution in the job's data.
import type { Hold, Wallet } from '../billing/wallet.ts';
import { firstChoice, firstStep, type FirstChoice, type StepDeps } from './execute.ts';
import type { ChronosRepository, RunRecord } from './repository.ts';

export type Admission = { ok: false } | { ok: true; first?: FirstChoice; cancel(): void };

/** How often a replica holding a trigger's reservation looks whether another replica claimed it. */
const ADMISSION_POLL_MS = 1_000;
/** A backstop: a queued execution nobody claimed in this long gives its reservation back. */
const ADMISSION_MAX_MS = 10 * 60_000;

export interface Admissions {
  admit(run: RunRecord, executionId: string, signal: AbortSignal): Promise<Admission>;
  /** The reservation of a trigger on this replica, taken over by its execution (once). */
  take(executionId: string): Hold | undefined;
  /** Gives every reservation back (shutdown). */
  close(): void;
}

export function admissions(ctx: {
  repo: Pick<ChronosRepository, 'execution'>;
  wallet: Pick<Wallet, 'reserve'>;
  steps: StepDeps;
  fee: bigint;
}): Admissions {
  /** Manual triggers' reservations on this replica, until their executions start. */
  const admitted = new Map<string, { hold: Hold; timer: NodeJS.Timeout }>();
  const take = (executionId: string): Hold | undefined => {
    const a = admitted.get(executionId);
    if (!a) return undefined;
    admitted.delete(executionId);
    clearInterval(a.timer);
    return a.hold;
  };
  const giveBack = (executionId: string) => take(executionId)?.release();

  return {
    take,
    async admit(run, executionId, signal) {
      const head = await firstStep(ctx.steps, run.accountId, run.steps[0]!, {
        requestId: executionId,
        signal,
      });
      const reservation = await ctx.wallet.reserve({
        accountId: run.accountId,
        amount: ctx.fee + head.bound,
        keyId: run.keyId,
      });
      if (!reservation.ok) return { ok: false };
      const first = firstChoice(head.model);
      const hold = reservation.hold;
      const since = Date.now();
      const timer = setInterval(() => {
        void (async () => {
          if (admitted.get(executionId)?.hold !== hold) return clearInterval(timer);
          const e = await ctx.repo.execution(executionId).catch(() => undefined);
          if (e === undefined) return; // the database did not answer: ask again
          if ((e && e.status !== 'queued') || !e || Date.now() - since > ADMISSION_MAX_MS)
            giveBack(executionId);
        })();
      }, ADMISSION_POLL_MS);
      timer.unref();
      admitted.set(executionId, { hold, timer });
      return { ok: true, ...(first ? { first } : {}), cancel: () => giveBack(executionId) };
    },
    close() {
      for (const id of [...admitted.keys()]) giveBack(id);
    },
  };
}
