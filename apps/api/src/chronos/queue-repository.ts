// Chronos's queues are its own tables (Prisma only here): the runs table is the fire queue (a run is
// due when its next_fire_at has come) and the pre-warm queue (prewarm_at), the executions table the
// execution queue (status `queued`). A replica takes what is due with FOR UPDATE SKIP LOCKED, so each
// row goes to one replica, and records what it took in the same transaction: a replica that dies
// before committing has recorded nothing, and its rows are free for another replica at once.
// Statements per batch are fixed whatever its size (1,000 fires may be due in the same minute).
import type { PrismaClient } from '@berth/db';
import type { ExecutionRecord, FirstChoice, RunRecord, StepResult } from './records.ts';
import type { Step } from './steps.ts';

/** The NOTIFY channel that tells every replica executions were queued. */
export const CHANNEL = 'berth_chronos';

export interface DueRun {
  id: string;
  accountId: string;
  schedule: string;
  timezone: string;
  steps: Step[];
  /** The occurrence that is due (the run's next_fire_at). */
  at: Date;
}

export interface FirePlan {
  next: Date | null;
  /** When the next fire's pre-warm is due (null: none). */
  prewarmAt: Date | null;
  /** The execution to record (null: none, e.g. Chronos is turned off). */
  executionId: string | null;
}

export interface FiredRun extends FirePlan {
  run: DueRun;
}

export interface FireBatch {
  fired: FiredRun[];
  /** The executions recorded (a second record of one occurrence is none). */
  recorded: ReadonlySet<string>;
  /** The earliest next_fire_at among the runs not yet due when the batch was taken. */
  nextDue: Date | null;
  /** Runs were due that this batch did not take (another replica holds them, or past the limit). */
  othersDue: boolean;
}

/** A queued execution this replica claimed, with its run. */
export interface ClaimedExecution {
  execution: ExecutionRecord;
  run: RunRecord;
  /** A manual trigger's choice for an `auto` step 0. */
  first?: FirstChoice;
}

export interface ExecutionEnd {
  status: 'succeeded' | 'failed';
  reason: string | null;
  results?: StepResult[];
  cost?: bigint;
}

export interface Beat {
  nextFire: Date | null;
  nextPrewarm: Date | null;
  /** Executions are queued (a wake-up may have been missed). */
  queued: boolean;
  /** Executions whose replica stopped beating, now failed. */
  lost: { id: string; worker: string | null }[];
}

export interface PrewarmClaim {
  id: string;
  accountId: string;
  steps: Step[];
  nextFireAt: Date | null;
}

export interface ChronosQueueRepository {
  /** Takes up to `limit` due runs, records their fires as `plan` says, all in one transaction. */
  fire(now: Date, limit: number, plan: (run: DueRun) => FirePlan): Promise<FireBatch>;
  /** Marks up to `limit` queued executions running for `worker` (oldest first). */
  claim(worker: string, limit: number): Promise<ClaimedExecution[]>;
  /** Ends executions that are queued or running (in `attempt`, when given); returns those ended. */
  finish(ends: readonly { id: string; end: ExecutionEnd; attempt?: number }[]): Promise<Set<string>>;
  /**
   * One statement: refreshes the heartbeat of `running`, fails the running executions whose
   * heartbeat is older than `lapseSeconds` (reason: `interrupted`, a format() string of the worker
   * and the step), and reads the earliest due times and whether executions are queued.
   */
  beat(running: readonly string[], interrupted: string, lapseSeconds: number): Promise<Beat>;
  /** Takes up to `limit` due pre-warms, each leased until `leaseUntil` (retried then if not done). */
  claimPrewarms(
    now: Date,
    limit: number,
    leaseUntil: Date,
  ): Promise<{ claimed: PrewarmClaim[]; next: Date | null }>;
  /** Sets the next pre-warm of runs still leased for the same fire (null: done). */
  releasePrewarms(lease: Date, done: readonly { id: string; fire: Date; next: Date | null }[]): Promise<void>;
}

const iso = (d: Date | null | undefined) => (d ? d.toISOString() : null);
const date = (v: Date | string | null) => (v === null ? null : new Date(v));

/** A claimed execution as the claim returns it: the execution's columns, then its run's. */
type ClaimRow = ExecutionRecord & {
  firstChoice: FirstChoice | null;
  runName: string;
  runSchedule: string;
  runTimezone: string;
  runSteps: Step[];
  runKeyId: string;
  runNextFireAt: Date | null;
  runCreatedAt: Date;
  runUpdatedAt: Date;
};

const claimedOf = (r: ClaimRow): ClaimedExecution => {
  const { firstChoice, runName, runSchedule, runTimezone, runSteps, runKeyId, runNextFireAt, ...e } = r;
  return {
    execution: { ...e, cost: BigInt(e.cost) },
    run: {
      id: e.runId,
      accountId: e.accountId,
      name: runName,
      schedule: runSchedule,
      timezone: runTimezone,
      steps: runSteps,
      keyId: runKeyId,
      nextFireAt: runNextFireAt,
      createdAt: r.runCreatedAt,
      updatedAt: r.runUpdatedAt,
    },
    ...(firstChoice ? { first: firstChoice } : {}),
  };
};

export function chronosQueueRepository(prisma: PrismaClient): ChronosQueueRepository {
  return {
    async fire(now, limit, plan) {
      // Whatever the batch size: BEGIN, the due runs locked, one statement that records the
      // executions and moves the runs (and wakes every replica when executions were queued), COMMIT.
      return prisma.$transaction(
        async (tx) => {
          const rows = await tx.$queryRaw<
            {
              id: string;
              account_id: string;
              schedule: string;
              timezone: string;
              steps: Step[];
              next_fire_at: Date;
            }[]
          >`
            SELECT id, account_id, schedule, timezone, steps, next_fire_at FROM chronos_runs
             WHERE next_fire_at <= ${iso(now)}::timestamptz
             ORDER BY next_fire_at, id LIMIT ${limit}
               FOR UPDATE SKIP LOCKED`;
          const fired: FiredRun[] = rows.map((r) => {
            const run: DueRun = {
              id: r.id,
              accountId: r.account_id,
              schedule: r.schedule,
              timezone: r.timezone,
              steps: r.steps,
              at: r.next_fire_at,
            };
            return { run, ...plan(run) };
          });
          // Every CTE reads the rows as they were before this statement: the execution is recorded
          // for the occurrence the run was due at, while the run moves on to its next one.
          const [result] = await tx.$queryRaw<
            { recorded: string[] | null; next_due: Date | null; others_due: boolean }[]
          >`
            WITH v AS (
              SELECT * FROM unnest(
                ${fired.map((f) => f.run.id)}::text[],
                ${fired.map((f) => iso(f.next))}::timestamptz[],
                ${fired.map((f) => iso(f.prewarmAt))}::timestamptz[],
                ${fired.map((f) => f.executionId)}::text[]
              ) AS v(id, next, prewarm, execution)),
            ins AS (
              INSERT INTO chronos_executions (id, run_id, account_id, trigger, scheduled_for, steps, created_at)
              SELECT v.execution, r.id, r.account_id, 'schedule', r.next_fire_at, r.steps, clock_timestamp()
                FROM v JOIN chronos_runs r ON r.id = v.id
               WHERE v.execution IS NOT NULL
              ON CONFLICT (run_id, scheduled_for) DO NOTHING
              RETURNING id),
            moved AS (
              UPDATE chronos_runs r SET next_fire_at = v.next, prewarm_at = v.prewarm
                FROM v WHERE r.id = v.id)
            SELECT (SELECT array_agg(id) FROM ins) AS recorded,
                   (SELECT min(next_fire_at) FROM chronos_runs
                     WHERE next_fire_at > ${iso(now)}::timestamptz) AS next_due,
                   EXISTS (SELECT 1 FROM chronos_runs
                            WHERE next_fire_at <= ${iso(now)}::timestamptz
                              AND NOT (id = ANY(${fired.map((f) => f.run.id)}::text[]))) AS others_due,
                   CASE WHEN EXISTS (SELECT 1 FROM ins) THEN pg_notify(${CHANNEL}, 'queued')::text END
                     AS notified`;
          return {
            fired,
            recorded: new Set(result?.recorded ?? []),
            nextDue: result?.next_due ?? null,
            othersDue: result?.others_due ?? false,
          };
        },
        // A large batch under load: more than Prisma's default 5 s.
        { maxWait: 10_000, timeout: 60_000 },
      );
    },

    async claim(worker, limit) {
      const rows = await prisma.$queryRaw<ClaimRow[]>`
        WITH picked AS (
          SELECT id FROM chronos_executions WHERE status = 'queued'
           ORDER BY created_at, id LIMIT ${limit}
             FOR UPDATE SKIP LOCKED)
        UPDATE chronos_executions e
           SET status = 'running', started_at = clock_timestamp(), heartbeat_at = now(),
               attempts = e.attempts + 1, worker = ${worker}
          FROM picked, chronos_runs r
         WHERE e.id = picked.id AND r.id = e.run_id
        RETURNING e.id, e.run_id AS "runId", e.account_id AS "accountId", e.trigger,
                  e.scheduled_for AS "scheduledFor", e.status, e.reason, e.steps, e.results, e.cost,
                  e.attempts, e.worker, e.created_at AS "createdAt", e.started_at AS "startedAt",
                  e.ended_at AS "endedAt", e.first_choice AS "firstChoice", r.name AS "runName",
                  r.schedule AS "runSchedule", r.timezone AS "runTimezone", r.steps AS "runSteps",
                  r.key_id AS "runKeyId", r.next_fire_at AS "runNextFireAt",
                  r.created_at AS "runCreatedAt", r.updated_at AS "runUpdatedAt"`;
      // The statement returns rows in no particular order: oldest first, as claimed.
      return rows
        .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : 1))
        .map(claimedOf);
    },

    async finish(ends) {
      if (!ends.length) return new Set();
      const rows = await prisma.$queryRaw<{ id: string }[]>`
        UPDATE chronos_executions e
           SET status = v.status::"ChronosExecutionStatus", reason = v.reason, ended_at = clock_timestamp(),
               results = coalesce(v.results, e.results), cost = coalesce(v.cost, e.cost)
          FROM unnest(
            ${ends.map((e) => e.id)}::text[],
            ${ends.map((e) => e.end.status)}::text[],
            ${ends.map((e) => e.end.reason)}::text[],
            ${ends.map((e) => (e.end.results ? JSON.stringify(e.end.results) : null))}::jsonb[],
            ${ends.map((e) => (e.end.cost !== undefined ? e.end.cost.toString() : null))}::bigint[],
            ${ends.map((e) => e.attempt ?? null)}::int[]
          ) AS v(id, status, reason, results, cost, attempt)
         WHERE e.id = v.id AND e.status IN ('queued', 'running')
           AND (v.attempt IS NULL OR e.attempts = v.attempt)
        RETURNING e.id`;
      return new Set(rows.map((r) => r.id));
    },

    async beat(running, interrupted, lapseSeconds) {
      const [row] = await prisma.$queryRaw<
        {
          next_fire: Date | null;
          next_prewarm: Date | null;
          queued: boolean;
          lost: { id: string; worker: string | null }[];
        }[]
      >`
        WITH beat AS (
          UPDATE chronos_executions SET heartbeat_at = now()
           WHERE id = ANY(${[...running]}::text[]) AND status = 'running'
          RETURNING id),
        lost AS (
          UPDATE chronos_executions
             SET status = 'failed', ended_at = now(),
                 reason = format(${interrupted}, worker, jsonb_array_length(results))
           WHERE status = 'running'
             AND coalesce(heartbeat_at, started_at) < now() - make_interval(secs => ${lapseSeconds})
             AND NOT (id = ANY(${[...running]}::text[]))
          RETURNING id, worker)
        SELECT (SELECT min(next_fire_at) FROM chronos_runs) AS next_fire,
               (SELECT min(prewarm_at) FROM chronos_runs) AS next_prewarm,
               EXISTS (SELECT 1 FROM chronos_executions WHERE status = 'queued') AS queued,
               (SELECT count(*) FROM beat)::int AS beaten,
               coalesce((SELECT json_agg(json_build_object('id', id, 'worker', worker)) FROM lost), '[]'::json)
                 AS lost`;
      return {
        nextFire: row?.next_fire ?? null,
        nextPrewarm: row?.next_prewarm ?? null,
        queued: row?.queued ?? false,
        lost: row?.lost ?? [],
      };
    },

    async claimPrewarms(now, limit, leaseUntil) {
      const [row] = await prisma.$queryRaw<
        {
          claimed: { id: string; account_id: string; steps: Step[]; next_fire_at: string | null }[];
          next: Date | null;
        }[]
      >`
        WITH picked AS (
          SELECT id FROM chronos_runs WHERE prewarm_at <= ${iso(now)}::timestamptz
           ORDER BY prewarm_at, id LIMIT ${limit}
             FOR UPDATE SKIP LOCKED),
        claimed AS (
          UPDATE chronos_runs r SET prewarm_at = ${iso(leaseUntil)}::timestamptz
            FROM picked WHERE r.id = picked.id
          RETURNING r.id, r.account_id, r.steps, r.next_fire_at)
        SELECT coalesce((SELECT json_agg(claimed) FROM claimed), '[]'::json) AS claimed,
               (SELECT min(prewarm_at) FROM chronos_runs WHERE prewarm_at > ${iso(now)}::timestamptz) AS next`;
      return {
        claimed: (row?.claimed ?? []).map((r) => ({
          id: r.id,
          accountId: r.account_id,
          steps: r.steps,
          nextFireAt: date(r.next_fire_at),
        })),
        next: row?.next ?? null,
      };
    },

    async releasePrewarms(lease, done) {
      if (!done.length) return;
      // A run moved or changed since (its PATCH set its own pre-warm) is left alone.
      await prisma.$executeRaw`
        UPDATE chronos_runs r SET prewarm_at = v.next
          FROM unnest(
            ${done.map((d) => d.id)}::text[],
            ${done.map((d) => iso(d.fire))}::timestamptz[],
            ${done.map((d) => iso(d.next))}::timestamptz[]
          ) AS v(id, fire, next)
         WHERE r.id = v.id AND r.next_fire_at = v.fire AND r.prewarm_at = ${iso(lease)}::timestamptz`;
    },
  };
}
