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
// - Pre-warm (./prewarm.ts): a fire whose steps may call a platform endpoint also queues a
//   `chronos-prewarm` job, delayed to CHRONOS_PREWARM_SECONDS before it, which wakes the hibernated
//   endpoints its steps would call.
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { PgBoss } from 'pg-boss';
import { Counter, type Registry } from 'prom-client';
import { JOBS_SCHEMA, type JobQueue } from '../jobs/queue.ts';
import { newId } from '../keys/format.ts';
import { dueAlarm, type DueAlarm } from './alarm.ts';
import { parseCron, nextFire } from './cron.ts';
import { toolAccess } from '../tools/access.ts';
import { firstChoice, firstStep, runSteps, stepModelOf, type FirstChoice, type StepDeps } from './execute.ts';
import { mayCallEndpoint, prewarmTargets, type PrewarmPlatform } from './prewarm.ts';
import type { Step } from './steps.ts';
import type { ChronosRepository, RunRecord, TxSql } from './repository.ts';

export const FIRE_QUEUE = 'chronos-fire';
export const EXECUTE_QUEUE = 'chronos-execute';
export const PREWARM_QUEUE = 'chronos-prewarm';
/** pg-boss's minimum: a dead replica's execution is noticed within about twice this. */
const HEARTBEAT_SECONDS = 10;

export interface ChronosConfig {
  /** CHRONOS_ENABLED: false turns every route and fire off, deleting nothing. */
  enabled: boolean;
  fee: bigint;
  stepTimeoutMs: number;
  /** Executions one replica runs at once. */
  concurrency: number;
  /**
   * How often each replica polls the fire and pre-warm queues and looks ahead for their due times
   * (./alarm.ts wakes the workers at those times): the accuracy only when a replica died or clocks
   * disagree by more than a second.
   */
  pollSeconds: number;
  /** How long before a fire its hibernated endpoints are woken; 0: never. */
  prewarmSeconds: number;
}

export interface Chronos {
  readonly config: ChronosConfig;
  readonly repo: ChronosRepository;
  /** Next occurrence after `after`, or null when the schedule never fires again. */
  next(schedule: string, timezone: string, after: Date): Date | null;
  /** Enqueues the fire of `at` for the run (and its pre-warm) in the caller's transaction. */
  enqueueFire(db: TxSql, runId: string, at: Date | null, steps: readonly Step[]): Promise<void>;
  /** Enqueues the pre-warm of the fire `at` (when the steps may call a platform endpoint). */
  enqueuePrewarm(db: TxSql, runId: string, at: Date, steps: readonly Step[]): Promise<void>;
  /** `first`: step 0's `auto` choice, made by the trigger's admission check (the step runs on it). */
  enqueueExecute(db: TxSql, executionId: string, steps: number, first?: FirstChoice): Promise<void>;
  /**
   * What the fee and the run's first step may cost, for the execution `executionId`: a manual
   * trigger reserves it first. A first step on `auto` is chosen here, once; `first` hands that
   * choice to the execution.
   */
  admission(
    run: RunRecord,
    executionId: string,
    signal: AbortSignal,
  ): Promise<{ amount: bigint; first?: FirstChoice }>;
  close(): Promise<void>;
}

export async function startChronos(deps: {
  jobs: JobQueue;
  repo: ChronosRepository;
  steps: Omit<StepDeps, 'fee' | 'stepTimeoutMs'>;
  config: ChronosConfig;
  logger: Logger;
  /** Platform endpoints (absent without a runtime: nothing to pre-warm). */
  platform?: PrewarmPlatform;
  registry?: Registry;
  now?: () => Date;
}): Promise<Chronos> {
  const { jobs, repo, config } = deps;
  const boss: PgBoss = jobs.boss;
  const logger = deps.logger.child({ component: 'chronos' });
  const now = deps.now ?? (() => new Date());
  const worker = `${process.pid}-${randomBytes(3).toString('hex')}`;
  const stepDeps: StepDeps = { ...deps.steps, fee: config.fee, stepTimeoutMs: config.stepTimeoutMs };
  const stop = new AbortController();
  let alarm: DueAlarm | undefined = undefined; // set once the workers exist

  await boss.createQueue(FIRE_QUEUE, { retryLimit: 5, retryDelay: 1 });
  // `notify`: a queued execution wakes the workers at once (fires and pre-warms are delayed jobs: their
  // workers are woken at the due times by ./alarm.ts).
  await boss.createQueue(EXECUTE_QUEUE, { retryLimit: 1, heartbeatSeconds: HEARTBEAT_SECONDS, notify: true });
  await boss.createQueue(PREWARM_QUEUE, { retryLimit: 2, retryDelay: 2 });
  const prewarmWakes = new Counter({
    name: 'berth_chronos_prewarm_wakes_total',
    help: 'Hibernated endpoints a Chronos pre-warm asked to wake ahead of a fire (one per endpoint and fire, across replicas)',
    registers: deps.registry ? [deps.registry] : [],
  });

  const next = (schedule: string, timezone: string, after: Date) => {
    const parsed = parseCron(schedule);
    return parsed.ok ? (nextFire(parsed.spec, timezone, after) ?? null) : null;
  };

  const prewarming = (steps: readonly Step[]) =>
    !!deps.platform && config.prewarmSeconds > 0 && mayCallEndpoint(deps.steps.catalog, steps);
  const prewarmAt = (at: Date) =>
    new Date(Math.max(now().getTime(), at.getTime() - config.prewarmSeconds * 1000));
  // One job per (run, occurrence): pg-boss's singleton key makes a second one a no-op.
  const fireJob = (runId: string, at: Date) => ({
    data: { runId, at: at.toISOString() },
    startAfter: at,
    singletonKey: `${runId}@${at.toISOString()}`,
  });
  const prewarmJob = (runId: string, at: Date) => ({
    data: { runId, at: at.toISOString() },
    startAfter: prewarmAt(at),
    singletonKey: `${runId}@${at.toISOString()}`,
  });
  // Past every step's wall clock: expiry is only a backstop, the heartbeat notices dead replicas.
  const executeJob = (executionId: string, steps: number, first?: FirstChoice) => ({
    data: { executionId, ...(first ? { first } : {}) },
    expireInSeconds: Math.ceil((steps * config.stepTimeoutMs) / 1000) + 120,
  });

  const enqueuePrewarm = async (db: TxSql, runId: string, at: Date, steps: readonly Step[]) => {
    if (!prewarming(steps)) return;
    const job = prewarmJob(runId, at);
    await boss.send(PREWARM_QUEUE, job.data, { ...job, db });
    alarm?.arm(PREWARM_QUEUE, job.startAfter.getTime());
  };
  const enqueueFire = async (db: TxSql, runId: string, at: Date | null, steps: readonly Step[]) => {
    if (!at) return;
    const job = fireJob(runId, at);
    await boss.send(FIRE_QUEUE, job.data, { ...job, db });
    alarm?.arm(FIRE_QUEUE, at.getTime());
    await enqueuePrewarm(db, runId, at, steps);
  };
  const enqueueExecute = async (db: TxSql, executionId: string, steps: number, first?: FirstChoice) => {
    const job = executeJob(executionId, steps, first);
    await boss.send(EXECUTE_QUEUE, job.data, { ...job, db });
  };

  /** A batch of due fires, in one transaction (repo.fireMany); the jobs it queues, in bulk. */
  const fireBatch = async (batch: { runId: string; at: string }[]) => {
    const fired = await repo.fireMany(
      batch.map((f) => ({ runId: f.runId, at: new Date(f.at) })),
      (run, due) => ({
        // Missed fires (no replica ran at the time): this one runs once, late; the occurrences
        // between it and now are skipped, and the schedule continues from now.
        next: next(run.schedule, run.timezone, new Date(Math.max(due.getTime(), now().getTime()))),
        // Turned off platform-wide: occurrences pass without executions (the schedule keeps going).
        executionId: config.enabled ? newId('chx') : null,
      }),
      async (db, fired) => {
        const fires = fired.filter((f) => f.next);
        const prewarms = fires.filter((f) => prewarming(f.run.steps));
        const executions = fired.filter((f) => f.executionId);
        if (fires.length)
          await boss.insert(
            FIRE_QUEUE,
            fires.map((f) => fireJob(f.run.id, f.next!)),
            { db },
          );
        if (prewarms.length)
          await boss.insert(
            PREWARM_QUEUE,
            prewarms.map((f) => prewarmJob(f.run.id, f.next!)),
            { db },
          );
        if (executions.length)
          await boss.insert(
            EXECUTE_QUEUE,
            executions.map((f) => executeJob(f.executionId!, f.run.steps.length)),
            { db },
          );
      },
    );
    for (const f of fired) {
      if (f.next) alarm?.arm(FIRE_QUEUE, f.next.getTime());
      if (f.next && prewarming(f.run.steps)) alarm?.arm(PREWARM_QUEUE, prewarmAt(f.next).getTime());
      logger.debug(
        { run: f.run.id, at: f.at.toISOString(), execution: f.executionId, next: f.next },
        'chronos fire',
      );
    }
  };

  const prewarm = async ({ runId, at }: { runId: string; at: string }) => {
    const platform = deps.platform;
    if (!platform || !config.enabled) return;
    const run = await repo.find(runId);
    // Deleted, or its schedule moved since (the new fire has its own pre-warm).
    if (!run || run.nextFireAt?.toISOString() !== at) return;
    const due = new Date(at).getTime();
    const targets = await prewarmTargets({ ...deps.steps, platform }, run.accountId, run.steps, {
      requestId: `chronos-prewarm-${run.id}`,
      signal: stop.signal,
    });
    for (const { endpoint, model, step } of targets) {
      const id = endpoint.metadata.name;
      // Woken now, it would hibernate again before the fire: come back within its idle timeout.
      const idleMs = (endpoint.spec.scaling?.idleTimeoutSeconds ?? 0) * 1000;
      if (idleMs > 0 && due - now().getTime() > idleMs * 0.8) {
        const later = due - idleMs / 2;
        await boss.send(
          PREWARM_QUEUE,
          { runId, at },
          { startAfter: new Date(later), singletonKey: `${runId}@${at}@${id}` },
        );
        alarm?.arm(PREWARM_QUEUE, later);
        continue;
      }
      await platform.upstream.wake(endpoint);
      prewarmWakes.inc();
      logger.info(
        {
          run: run.id,
          at,
          endpoint: id,
          model,
          step,
          leadSeconds: Math.round((due - now().getTime()) / 1000),
        },
        'chronos pre-warm: woke a hibernated endpoint ahead of the fire',
      );
    }
  };

  const execute = async ({ executionId, first }: { executionId: string; first?: FirstChoice }) => {
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
      outcome = await runSteps(
        stepDeps,
        run,
        execution,
        stop.signal,
        (results, cost) => {
          step = results.length;
          return repo.progress(executionId, attempt, results, cost);
        },
        stepModelOf(deps.steps.catalog, first),
      );
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

  // A batch of fires is one transaction (a retried batch records nothing twice: the fires it handled
  // are stale); a batch of pre-warms is handled in parallel; executions one at a time per worker.
  const handle =
    <T>(name: string, fn: (data: T) => Promise<void>, retryDelaySeconds = 0) =>
    async (batch: { id: string; data: T }[]) => {
      const results = await Promise.allSettled(batch.map((job) => fn(job.data)));
      const failed = results.findIndex((r) => r.status === 'rejected');
      if (failed >= 0) {
        const err = (results[failed] as PromiseRejectedResult).reason as unknown;
        logger.error({ err, job: name, id: batch[failed]!.id }, 'chronos job failed; pg-boss will retry it');
        alarm?.arm(name, Date.now() + retryDelaySeconds * 1000);
        throw err;
      }
    };
  // Fires and pre-warms are delayed jobs: polled rarely, woken at their due times by the alarm.
  const fireWorker = await boss.work<{ runId: string; at: string }>(
    FIRE_QUEUE,
    { pollingIntervalSeconds: config.pollSeconds, batchSize: 50, burstWhenBatchFull: true },
    async (batch) => {
      try {
        await fireBatch(batch.map((job) => job.data));
      } catch (err) {
        logger.error(
          { err, job: FIRE_QUEUE, jobs: batch.length },
          'chronos fires failed; pg-boss will retry them',
        );
        alarm?.arm(FIRE_QUEUE, Date.now() + 1_000);
        throw err;
      }
    },
  );
  const prewarmWorker = await boss.work<{ runId: string; at: string }>(
    PREWARM_QUEUE,
    { pollingIntervalSeconds: config.pollSeconds, batchSize: 25, burstWhenBatchFull: true },
    handle(PREWARM_QUEUE, prewarm, 2),
  );
  alarm = dueAlarm({
    db: boss.getDb(),
    schema: JOBS_SCHEMA,
    workers: new Map([
      [FIRE_QUEUE, fireWorker],
      [PREWARM_QUEUE, prewarmWorker],
    ]),
    notify: (id) => boss.notifyWorker(id),
    intervalMs: config.pollSeconds * 1000,
    logger,
  });
  // Executions: CHRONOS_CONCURRENCY workers of one job each. A queued execution wakes them all
  // (NOTIFY); otherwise the first polls every 30 s as a backstop (every second without LISTEN/NOTIFY,
  // on the embedded database) and the others every 5 minutes. A worker that got a job fetches again
  // at once and wakes the next one, so a backlog is drained by all of them and an idle replica costs
  // the database next to nothing.
  const executeWorkers: string[] = [];
  const runExecute = handle(EXECUTE_QUEUE, execute);
  for (let i = 0; i < config.concurrency; i++) {
    const id = await boss.work<{ executionId: string; first?: FirstChoice }>(
      EXECUTE_QUEUE,
      {
        pollingIntervalSeconds: i === 0 ? 1 : 30,
        notifyPollingIntervalSeconds: i === 0 ? 30 : 300,
        batchSize: 1,
      },
      async (batch) => {
        try {
          await runExecute(batch);
        } finally {
          boss.notifyWorker(executeWorkers[i]!);
          boss.notifyWorker(executeWorkers[(i + 1) % executeWorkers.length]!);
        }
      },
    );
    executeWorkers.push(id);
  }

  return {
    config,
    repo,
    next,
    enqueueFire,
    enqueuePrewarm,
    enqueueExecute,
    admission: async (run, executionId, signal) => {
      const head = await firstStep(stepDeps, run.accountId, run.steps[0]!, {
        requestId: executionId,
        signal,
      });
      const first = firstChoice(head.model);
      return { amount: config.fee + head.bound, ...(first ? { first } : {}) };
    },
    async close() {
      // Steps in flight end now, their executions failed with the reason (see execute above).
      alarm?.close();
      stop.abort(new Error('the API is shutting down'));
    },
  };
}
