// Chronos, assembled: runs and executions are rows, and those tables are its queues.
//
// - A run's next_fire_at is its pending fire. A replica's timer rings at the earliest due time it
//   knows (./scheduler.ts) and a fire pass (./fire.ts) takes every due run (FOR UPDATE SKIP LOCKED,
//   up to 1,000 in one transaction): it records each execution (unique per run and occurrence),
//   computes the next occurrence in the run's time zone and sets when that fire's pre-warm is due —
//   all or nothing, so a replica that dies between taking fires and recording them has recorded
//   nothing, and another replica takes them within about a second.
// - Recorded executions are `queued`; the transaction NOTIFYs every replica, which claim as many as
//   they have free slots in one statement (./executor.ts) and run their steps (./execution-job.ts).
//   A running execution's heartbeat is refreshed every 5 s; a replica killed mid-run stops beating,
//   and another one marks its execution failed within about 15 s, saying so — steps are never run
//   twice behind the user's back.
// - Pre-warm (./prewarm.ts, ./prewarm-job.ts): prewarm_at, set with each fire to
//   CHRONOS_PREWARM_SECONDS before it, is due at its own time like a fire; the pass wakes the
//   hibernated endpoints the fire's steps would call.
// - A manual trigger reserves the fee and step 0 until its execution starts (./admission.ts).
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { Counter, Histogram, type Registry } from 'prom-client';
import type { JobQueue } from '../platform/jobs.ts';
import { admissions, type Admission } from './admission.ts';
import { systemClock, type ChronosClock } from './clock.ts';
import type { StepDeps } from './execute.ts';
import { executionHandler } from './execution-job.ts';
import { executor } from './executor.ts';
import { fireHandler, nextOccurrence } from './fire.ts';
import { mayCallEndpoint, type PrewarmPlatform } from './prewarm.ts';
import { prewarmHandler } from './prewarm-job.ts';
import type { ChronosQueueRepository } from './queue-repository.ts';
import type { ChronosRepository, RunRecord } from './repository.ts';
import { scheduler } from './scheduler.ts';
import type { Step } from './steps.ts';
import { listenForWakeups, type WakeupSource } from './wakeups.ts';

export type { Admission } from './admission.ts';
export type { ChronosClock } from './clock.ts';

export interface ChronosConfig {
  /** CHRONOS_ENABLED: false turns every route and fire off, deleting nothing. */
  enabled: boolean;
  fee: bigint;
  stepTimeoutMs: number;
  /** Executions one replica runs at once. */
  concurrency: number;
  /** How long before a fire its hibernated endpoints are woken; 0: never. */
  prewarmSeconds: number;
  /** BERTH_QUOTA_CHRONOS_RUNS: runs one account may have, unless the operator set its own quota. */
  runsQuota: number;
}

export interface Chronos {
  readonly config: ChronosConfig;
  readonly repo: ChronosRepository;
  /** Chronos's clock: schedules are read, and fires are due, by it. */
  now(): Date;
  /** Next occurrence after `after`, or null when the schedule never fires again. */
  next(schedule: string, timezone: string, after: Date): Date | null;
  /** When the pre-warm of the fire `at` is due for these steps (null: none; never before now). */
  prewarmAt(steps: readonly Step[], at: Date | null): Date | null;
  /** A run was saved on this replica with these due times: its timer is set at once. */
  scheduled(fireAt: Date | null, prewarmAt: Date | null): void;
  /** An execution was queued on this replica (a manual trigger): claim it now. */
  queued(): void;
  /**
   * A manual trigger's admission for the execution `executionId` (./admission.ts): reserves the run
   * fee and what step 0 may cost (not ok: the trigger answers 402 at once) until the execution
   * starts. `cancel()`: the execution was not queued after all.
   */
  admit(run: RunRecord, executionId: string, signal: AbortSignal): Promise<Admission>;
  close(): Promise<void>;
}

/** The pg-boss queues Chronos used before its tables were its queues. */
const LEGACY_QUEUES = ['chronos-fire', 'chronos-prewarm', 'chronos-execute'];
/** How long shutting down waits for the executions it interrupts to be recorded. */
const CLOSE_WAIT_MS = 5_000;

export async function startChronos(deps: {
  jobs: JobQueue;
  repo: ChronosRepository;
  queue: ChronosQueueRepository;
  /** Where the NOTIFY that executions were queued is heard. */
  wakeups: WakeupSource;
  steps: Omit<StepDeps, 'fee' | 'stepTimeoutMs'>;
  config: ChronosConfig;
  logger: Logger;
  /** Platform endpoints (absent without a runtime: nothing to pre-warm). */
  platform?: PrewarmPlatform;
  registry?: Registry;
  clock?: ChronosClock;
}): Promise<Chronos> {
  const { repo, queue, config } = deps;
  const logger = deps.logger.child({ component: 'chronos' });
  const clock = deps.clock ?? systemClock;
  const steps: StepDeps = { ...deps.steps, fee: config.fee, stepTimeoutMs: config.stepTimeoutMs };
  const stop = new AbortController();
  const admitted = admissions({ repo, wallet: deps.steps.wallet, steps, fee: config.fee });
  const registers = deps.registry ? [deps.registry] : [];

  // A replica of the version that fired through pg-boss cannot queue fires or executions any more
  // (its inserts fail): during a rolling upgrade only this version's replicas fire.
  for (const name of LEGACY_QUEUES)
    if (await deps.jobs.boss.getQueue(name)) await deps.jobs.boss.deleteQueue(name);

  const prewarmAt = (s: readonly Step[], at: Date | null) =>
    at && deps.platform && config.prewarmSeconds > 0 && mayCallEndpoint(steps.catalog, s)
      ? new Date(Math.max(clock.now().getTime(), at.getTime() - config.prewarmSeconds * 1000))
      : null;
  const worker = `${process.pid}-${randomBytes(3).toString('hex')}`;
  const executions = executor({
    repo: queue,
    worker,
    concurrency: config.concurrency,
    logger,
    run: (batch) => runBatch(batch),
  });
  const runBatch = executionHandler({
    repo,
    finish: executions.finish,
    steps,
    enabled: config.enabled,
    takeAdmitted: (id) => admitted.take(id),
    stop: stop.signal,
    logger,
  });
  const wakeups = await listenForWakeups(deps.wakeups, executions.wake, logger);
  const timer = scheduler({
    clock,
    repo: queue,
    fire: fireHandler({
      repo: queue,
      clock,
      enabled: config.enabled,
      prewarmAt,
      delay: new Histogram({
        name: 'berth_chronos_fire_delay_seconds',
        help: 'Seconds from a scheduled run’s due time to its fire being recorded (its execution queued), per fire, across replicas',
        buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
        registers,
      }),
      logger,
    }),
    prewarm: prewarmHandler({
      repo: queue,
      steps,
      ...(deps.platform ? { platform: deps.platform } : {}),
      enabled: config.enabled,
      wakes: new Counter({
        name: 'berth_chronos_prewarm_wakes_total',
        help: 'Hibernated endpoints a Chronos pre-warm asked to wake ahead of a fire (one per endpoint and fire, across replicas)',
        registers,
      }),
      clock,
      logger,
      stop: stop.signal,
    }),
    executions,
    logger,
  });

  return {
    config,
    repo,
    now: () => clock.now(),
    next: nextOccurrence,
    prewarmAt,
    scheduled: (fireAt, at) => timer.schedule(fireAt, at),
    queued: () => executions.wake(),
    admit: (run, executionId, signal) => admitted.admit(run, executionId, signal),
    async close() {
      timer.close();
      admitted.close();
      // Steps in flight end now, their executions failed with the reason (./execution-job.ts).
      stop.abort(new Error('the API is shutting down'));
      await executions.close(CLOSE_WAIT_MS);
      await wakeups.close();
    },
  };
}
