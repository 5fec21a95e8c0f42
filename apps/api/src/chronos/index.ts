// Chronos, assembled: runs are rows, their fires and executions are pg-boss jobs.
//
// - Each run has exactly one pending `chronos-fire` job: for its next occurrence, delayed with
//   pg-boss's `startAfter` until then, written in the same transaction as the run (and moved by a
//   PATCH in the PATCH's transaction). pg-boss hands a due job to one replica (SKIP LOCKED).
// - The fire handler, in one transaction holding the run's row: records the execution (unique per
//   run and occurrence, so a second delivery records nothing), computes the next occurrence in the
//   run's time zone, and queues the next fire and a `chronos-execute` job. A fire whose time is no
//   longer the run's next_fire_at (changed or deleted since) does nothing.
// - The execute handler claims the execution (queued → running, one attempt) and runs its steps.
//   The queue has a pg-boss heartbeat: a replica killed mid-run stops beating, pg-boss hands the job
//   to another replica, which finds the execution `running` from the dead attempt and marks it
//   failed, saying so — steps are never run twice behind the user's back.
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { PgBoss } from 'pg-boss';
import type { JobQueue } from '../jobs/queue.ts';
import { newId } from '../keys/format.ts';
import { parseCron, nextFire } from './cron.ts';
import { toolAccess } from '../tools/access.ts';
import { runSteps, stepBound, type StepDeps } from './execute.ts';
import type { ChronosRepository, RunRecord, TxSql } from './repository.ts';

export const FIRE_QUEUE = 'chronos-fire';
export const EXECUTE_QUEUE = 'chronos-execute';
/** pg-boss's minimum: a dead replica's execution is noticed within about twice this. */
const HEARTBEAT_SECONDS = 10;

export interface ChronosConfig {
  /** CHRONOS_ENABLED: false turns every route and fire off, deleting nothing. */
  enabled: boolean;
  fee: bigint;
  stepTimeoutMs: number;
  /** Executions one replica runs at once. */
  concurrency: number;
  /** How often each replica looks for due jobs (pg-boss polling): the fire-time accuracy. */
  pollSeconds: number;
}

export interface Chronos {
  readonly config: ChronosConfig;
  readonly repo: ChronosRepository;
  /** Next occurrence after `after`, or null when the schedule never fires again. */
  next(schedule: string, timezone: string, after: Date): Date | null;
  /** Enqueues the fire of `at` for the run in the caller's transaction. */
  enqueueFire(db: TxSql, runId: string, at: Date | null): Promise<void>;
  enqueueExecute(db: TxSql, executionId: string, steps: number): Promise<void>;
  /** What the fee and the run's first step may cost: a manual trigger reserves it first. */
  admission(run: RunRecord): Promise<bigint>;
  close(): Promise<void>;
}

export async function startChronos(deps: {
  jobs: JobQueue;
  repo: ChronosRepository;
  steps: Omit<StepDeps, 'fee' | 'stepTimeoutMs'>;
  config: ChronosConfig;
  logger: Logger;
  now?: () => Date;
}): Promise<Chronos> {
  const { jobs, repo, config } = deps;
  const boss: PgBoss = jobs.boss;
  const logger = deps.logger.child({ component: 'chronos' });
  const now = deps.now ?? (() => new Date());
  const worker = `${process.pid}-${randomBytes(3).toString('hex')}`;
  const stepDeps: StepDeps = { ...deps.steps, fee: config.fee, stepTimeoutMs: config.stepTimeoutMs };
  const stop = new AbortController();

  await boss.createQueue(FIRE_QUEUE, { retryLimit: 5, retryDelay: 1 });
  // `notify`: a queued execution wakes an idle worker at once (fires are delayed jobs: polled).
  await boss.createQueue(EXECUTE_QUEUE, { retryLimit: 1, heartbeatSeconds: HEARTBEAT_SECONDS, notify: true });

  const next = (schedule: string, timezone: string, after: Date) => {
    const parsed = parseCron(schedule);
    return parsed.ok ? (nextFire(parsed.spec, timezone, after) ?? null) : null;
  };

  const enqueueFire = async (db: TxSql, runId: string, at: Date | null) => {
    if (!at) return;
    await boss.send(
      FIRE_QUEUE,
      { runId, at: at.toISOString() },
      { startAfter: at, singletonKey: `${runId}@${at.toISOString()}`, db },
    );
  };
  const enqueueExecute = async (db: TxSql, executionId: string, steps: number) => {
    await boss.send(
      EXECUTE_QUEUE,
      { executionId },
      // Past every step's wall clock: expiry is only a backstop, the heartbeat notices dead replicas.
      { expireInSeconds: Math.ceil((steps * config.stepTimeoutMs) / 1000) + 120, db },
    );
  };

  const fire = async ({ runId, at }: { runId: string; at: string }) => {
    const due = new Date(at);
    let steps = 1;
    const outcome = await repo.fire(
      runId,
      due,
      (run) => {
        steps = run.steps.length;
        // Missed fires (no replica ran at the time): this one runs once, late; the occurrences
        // between it and now are skipped, and the schedule continues from now.
        const after = new Date(Math.max(due.getTime(), now().getTime()));
        return {
          next: next(run.schedule, run.timezone, after),
          // Turned off platform-wide: occurrences pass without executions (the schedule keeps going).
          executionId: config.enabled ? newId('chx') : null,
        };
      },
      async (db, fired) => {
        await enqueueFire(db, runId, fired.next);
        if (fired.executionId) await enqueueExecute(db, fired.executionId, steps);
      },
    );
    if (outcome.kind === 'fired')
      logger.debug({ run: runId, at, execution: outcome.executionId, next: outcome.next }, 'chronos fire');
  };

  const execute = async ({ executionId }: { executionId: string }) => {
    const claim = await repo.claim(executionId, worker);
    if (!claim.claimed) {
      const e = claim.execution;
      if (e?.status === 'running') {
        // The attempt that claimed it stopped beating: its replica died mid-run.
        const step = e.results.length;
        const reason = `Interrupted: the API process running this execution (${e.worker}) stopped during step ${step}; Chronos does not run steps twice, so it was not resumed`;
        await repo.finish(executionId, { status: 'failed', reason }, e.attempts);
        logger.warn(
          { execution: executionId, worker: e.worker },
          'chronos execution interrupted by a dead replica',
        );
      }
      return;
    }
    const execution = claim.execution;
    const attempt = execution.attempts;
    const end = (status: 'succeeded' | 'failed', reason: string | null) =>
      repo.finish(executionId, { status, reason }, attempt);
    if (!config.enabled)
      return void (await end('failed', 'chronos_disabled: Chronos is turned off platform-wide'));
    const run = await repo.get(execution.accountId, execution.runId);
    if (!run) return void (await end('failed', 'The run was deleted'));
    const access = await toolAccess(deps.steps.tools, { accountId: run.accountId, toolPin: [] }, ['chronos']);
    if (!access.ok)
      return void (await end(
        'failed',
        'chronos_not_enabled: Chronos is not enabled for this account; enable it with POST /api/tools {"tool_id": "chronos"}',
      ));
    let step = 0;
    let outcome: Awaited<ReturnType<typeof runSteps>>;
    try {
      outcome = await runSteps(stepDeps, run, execution, stop.signal, (results, cost) => {
        step = results.length;
        return repo.progress(executionId, attempt, results, cost);
      });
    } catch (err) {
      if (!stop.signal.aborted) throw err;
      await end(
        'failed',
        `Interrupted: the API process running this execution was shut down during step ${step}; Chronos does not run steps twice, so it was not resumed`,
      );
      return;
    }
    await repo.finish(executionId, outcome, attempt);
    logger.info(
      { run: run.id, execution: executionId, status: outcome.status, cost: outcome.cost.toString() },
      'chronos execution ended',
    );
  };

  // A batch of fires is handled in parallel (each is its own transaction, and idempotent: a retried
  // batch finds the fires it already handled stale); executions one at a time per worker.
  const handle =
    <T>(name: string, fn: (data: T) => Promise<void>) =>
    async (batch: { id: string; data: T }[]) => {
      const results = await Promise.allSettled(batch.map((job) => fn(job.data)));
      const failed = results.findIndex((r) => r.status === 'rejected');
      if (failed >= 0) {
        const err = (results[failed] as PromiseRejectedResult).reason as unknown;
        logger.error({ err, job: name, id: batch[failed]!.id }, 'chronos job failed; pg-boss will retry it');
        throw err;
      }
    };
  await boss.work<{ runId: string; at: string }>(
    FIRE_QUEUE,
    { pollingIntervalSeconds: config.pollSeconds, batchSize: 25, burstWhenBatchFull: true },
    handle(FIRE_QUEUE, fire),
  );
  await boss.work<{ executionId: string }>(
    EXECUTE_QUEUE,
    {
      pollingIntervalSeconds: config.pollSeconds,
      notifyPollingIntervalSeconds: config.pollSeconds,
      batchSize: 1,
      localConcurrency: config.concurrency,
    },
    handle(EXECUTE_QUEUE, execute),
  );

  return {
    config,
    repo,
    next,
    enqueueFire,
    enqueueExecute,
    admission: async (run) => config.fee + (await stepBound(stepDeps, run.accountId, run.steps[0]!)),
    async close() {
      // Steps in flight end now, their executions failed with the reason (see execute above).
      stop.abort(new Error('the API is shutting down'));
    },
  };
}
