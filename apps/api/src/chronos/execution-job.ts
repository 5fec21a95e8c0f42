// Running the executions this replica claimed (./executor.ts): each runs its steps (./execute.ts)
// and records how it ended. An execution is claimed once (queued → running); when its replica dies
// mid-run, its heartbeat lapses and another replica marks it failed with INTERRUPTED
// (./queue-repository.ts beat) — steps are never run twice behind the user's back. Shutting down
// ends the steps in flight the same way.
import type { Logger } from 'pino';
import type { Hold } from '../billing/wallet.ts';
import { toolAccess } from '../tools/access.ts';
import { runSteps, stepModelOf, type StepDeps } from './execute.ts';
import type { ClaimedExecution, ExecutionEnd } from './queue-repository.ts';
import type { ChronosRepository } from './repository.ts';

/** What a replica that died mid-run leaves (a format() string: the worker, then the step). */
export const INTERRUPTED =
  'Interrupted: the API process running this execution (%s) stopped during step %s; Chronos does not run steps twice, so it was not resumed';

export function executionHandler(ctx: {
  repo: Pick<ChronosRepository, 'progress'>;
  /** Ends the execution in `attempt` (false: it was not running in that attempt any more). */
  finish(id: string, end: ExecutionEnd, attempt: number): Promise<boolean>;
  steps: StepDeps;
  enabled: boolean;
  /** A manual trigger's reservation on this replica, handed over (./admission.ts). */
  takeAdmitted(executionId: string): Hold | undefined;
  /** Aborts on shutdown: the steps in flight end, their executions failed with the reason. */
  stop: AbortSignal;
  logger: Logger;
}): (batch: readonly ClaimedExecution[]) => Promise<void>[] {
  const { repo, logger, stop } = ctx;

  const runExecution = async (
    { execution, run, first }: ClaimedExecution,
    enabledForAccount: Promise<boolean>,
    admittedHold: Hold | undefined,
  ) => {
    const attempt = execution.attempts;
    const end = (status: 'succeeded' | 'failed', reason: string | null) =>
      ctx.finish(execution.id, { status, reason }, attempt);
    if (!ctx.enabled)
      return void (await end('failed', 'chronos_disabled: Chronos is turned off platform-wide'));
    if (!(await enabledForAccount))
      return void (await end(
        'failed',
        'chronos_not_enabled: Chronos is not enabled for this account; enable it with POST /api/tools {"tool_id": "chronos"}',
      ));
    let step = 0;
    let outcome: Awaited<ReturnType<typeof runSteps>>;
    try {
      outcome = await runSteps(
        ctx.steps,
        run,
        execution,
        stop,
        (results, cost) => {
          step = results.length;
          return repo.progress(execution.id, attempt, results, cost);
        },
        stepModelOf(ctx.steps.catalog, first),
        admittedHold,
      );
    } catch (err) {
      if (!stop.aborted) throw err;
      await end(
        'failed',
        `Interrupted: the API process running this execution was shut down during step ${step}; Chronos does not run steps twice, so it was not resumed`,
      );
      return;
    }
    await ctx.finish(execution.id, outcome, attempt);
    logger.info(
      { run: run.id, execution: execution.id, status: outcome.status, cost: outcome.cost.toString() },
      'chronos execution ended',
    );
  };

  return (batch) => {
    // Whether each account still has Chronos enabled: one look per account and batch (1,000 fires
    // of one account need not ask 1,000 times).
    const access = new Map<string, Promise<boolean>>();
    const enabledFor = (accountId: string) => {
      let found = access.get(accountId);
      if (!found) {
        found = ctx.enabled
          ? toolAccess(ctx.steps.tools, { accountId, toolPin: [] }, ['chronos']).then((a) => a.ok)
          : Promise.resolve(false);
        access.set(accountId, found);
      }
      return found;
    };
    return batch.map(async (claimed) => {
      // runSteps turns a trigger's reservation into the fee's hold; on every other way out of here
      // it is given back (a hold's release after its settle or release does nothing).
      const admittedHold = ctx.takeAdmitted(claimed.execution.id);
      try {
        await runExecution(claimed, enabledFor(claimed.execution.accountId), admittedHold);
      } finally {
        admittedHold?.release();
      }
    });
  };
}
