// Data access for Chronos runs and their executions (Prisma only here). Writes that queue a job do
// it in the same transaction (pg-boss's `db` option over this transaction): a run is never saved
// without its next fire queued, and a fire never records an execution without queuing it.
import type { Prisma, PrismaClient } from '@berth/db';
import type { Step } from './steps.ts';

export interface RunRecord {
  id: string;
  accountId: string;
  name: string;
  schedule: string;
  timezone: string;
  steps: Step[];
  keyId: string;
  nextFireAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

export type ExecutionStatus = 'queued' | 'running' | 'succeeded' | 'failed';

export interface StepResult {
  index: number;
  type: Step['type'];
  status: 'succeeded' | 'failed';
  /** The catalog model that answered (chat), or the MCP tool called (tool). */
  model?: string;
  tool?: string;
  /** A step on `auto`: the model Olympus chose and why (its x-berth-olympus-reason). */
  olympus?: { model: string; reason: string };
  output: string | null;
  error: string | null;
  /** Micro-units, as a decimal string of the integer (JSON has no bigint). */
  cost: string;
  startedAt: string;
  endedAt: string;
}

export interface ExecutionRecord {
  id: string;
  runId: string;
  accountId: string;
  trigger: 'schedule' | 'manual';
  scheduledFor: Date | null;
  status: ExecutionStatus;
  reason: string | null;
  steps: Step[];
  results: StepResult[];
  cost: bigint;
  attempts: number;
  worker: string | null;
  createdAt: Date;
  startedAt: Date | null;
  endedAt: Date | null;
}

/** What pg-boss needs to write its job in our transaction. */
export interface TxSql {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}
export type Enqueue = (db: TxSql) => Promise<void>;

export interface Fired {
  run: RunRecord;
  /** The occurrence that fired. */
  at: Date;
  /** The execution recorded (null: none planned, or this occurrence already had one). */
  executionId: string | null;
  next: Date | null;
}

export interface ChronosRepository {
  create(run: Omit<RunRecord, 'createdAt' | 'updatedAt'>, enqueue: Enqueue): Promise<RunRecord>;
  get(accountId: string, id: string): Promise<RunRecord | null>;
  /** Any account's run (job handlers, which have only its id). */
  find(id: string): Promise<RunRecord | null>;
  list(accountId: string): Promise<RunRecord[]>;
  /** Null when the account has no such run. `enqueue` runs in the update's transaction. */
  update(
    accountId: string,
    id: string,
    patch: Partial<Pick<RunRecord, 'name' | 'schedule' | 'timezone' | 'steps' | 'nextFireAt'>>,
    enqueue?: Enqueue,
  ): Promise<RunRecord | null>;
  delete(accountId: string, id: string): Promise<RunRecord | null>;
  /**
   * Occurrences of runs, each once, in one transaction: those whose run is gone or whose next fire
   * is no longer `at` (changed since) are left out; for the others it records the execution (unless
   * `plan` says not to), moves the run to its next fire and lets `enqueue` queue the jobs.
   */
  fireMany(
    fires: readonly { runId: string; at: Date }[],
    plan: (run: RunRecord, at: Date) => { next: Date | null; executionId: string | null },
    enqueue: (db: TxSql, fired: readonly Fired[]) => Promise<void>,
  ): Promise<Fired[]>;
  /** A manual trigger's execution, queued in the same transaction. */
  queueManual(run: RunRecord, executionId: string, enqueue: Enqueue): Promise<ExecutionRecord>;
  /**
   * Marks a queued execution running for this attempt. Otherwise its current state (running: an
   * earlier attempt's replica died; finished: a duplicate delivery).
   */
  claim(
    id: string,
    worker: string,
  ): Promise<
    { claimed: true; execution: ExecutionRecord } | { claimed: false; execution: ExecutionRecord | null }
  >;
  /** Progress of a running attempt (the results so far). */
  progress(id: string, attempt: number, results: StepResult[], cost: bigint): Promise<void>;
  /** Ends an execution that is queued or running (in `attempt`, when given). False: it was not. */
  finish(
    id: string,
    end: { status: 'succeeded' | 'failed'; reason: string | null; results?: StepResult[]; cost?: bigint },
    attempt?: number,
  ): Promise<boolean>;
  executions(accountId: string, runId: string, limit: number): Promise<ExecutionRecord[]>;
  execution(id: string): Promise<ExecutionRecord | null>;
}

type RunRow = Prisma.ChronosRunGetPayload<object>;
type ExecutionRow = Prisma.ChronosExecutionGetPayload<object>;

const runOf = (r: RunRow): RunRecord => ({ ...r, steps: r.steps as unknown as Step[] });
const executionOf = (r: ExecutionRow): ExecutionRecord => ({
  ...r,
  trigger: r.trigger as ExecutionRecord['trigger'],
  steps: r.steps as unknown as Step[],
  results: r.results as unknown as StepResult[],
});

function txSql(tx: Prisma.TransactionClient): TxSql {
  return {
    async executeSql(text, values = []) {
      return { rows: await tx.$queryRawUnsafe<unknown[]>(text, ...values) };
    },
  };
}

const json = (v: unknown) => v as Prisma.InputJsonValue;

interface RawRun {
  id: string;
  account_id: string;
  name: string;
  schedule: string;
  timezone: string;
  steps: unknown;
  key_id: string;
  next_fire_at: Date | null;
  created_at: Date;
  updated_at: Date;
}
const runOfRaw = (r: RawRun): RunRecord => ({
  id: r.id,
  accountId: r.account_id,
  name: r.name,
  schedule: r.schedule,
  timezone: r.timezone,
  steps: r.steps as Step[],
  keyId: r.key_id,
  nextFireAt: r.next_fire_at,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

export function chronosRepository(prisma: PrismaClient): ChronosRepository {
  return {
    async create(run, enqueue) {
      return prisma.$transaction(async (tx) => {
        const row = await tx.chronosRun.create({ data: { ...run, steps: json(run.steps) } });
        await enqueue(txSql(tx));
        return runOf(row);
      });
    },
    async get(accountId, id) {
      const row = await prisma.chronosRun.findFirst({ where: { id, accountId } });
      return row ? runOf(row) : null;
    },
    async find(id) {
      const row = await prisma.chronosRun.findUnique({ where: { id } });
      return row ? runOf(row) : null;
    },
    async list(accountId) {
      const rows = await prisma.chronosRun.findMany({
        where: { accountId },
        orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
      });
      return rows.map(runOf);
    },
    async update(accountId, id, patch, enqueue) {
      return prisma.$transaction(async (tx) => {
        const locked = await tx.$queryRaw<{ id: string }[]>`
          SELECT id FROM chronos_runs WHERE id = ${id} AND account_id = ${accountId} FOR UPDATE`;
        if (!locked.length) return null;
        const { steps, ...rest } = patch;
        const row = await tx.chronosRun.update({
          where: { id },
          data: { ...rest, ...(steps ? { steps: json(steps) } : {}), updatedAt: new Date() },
        });
        if (enqueue) await enqueue(txSql(tx));
        return runOf(row);
      });
    },
    async delete(accountId, id) {
      const row = await prisma.chronosRun.findFirst({ where: { id, accountId } });
      if (!row) return null;
      const { count } = await prisma.chronosRun.deleteMany({ where: { id, accountId } });
      return count ? runOf(row) : null;
    },
    async fireMany(fires, plan, enqueue) {
      if (!fires.length) return [];
      return prisma.$transaction(async (tx) => {
        // Row locks, in id order: a concurrent PATCH (which moves next_fire_at) and these fires
        // serialize. A batch costs five statements whatever its size (1,000 fires may be due at once).
        const rows = await tx.$queryRaw<RawRun[]>`
          SELECT r.id, r.account_id, r.name, r.schedule, r.timezone, r.steps, r.key_id, r.next_fire_at,
                 r.created_at, r.updated_at
            FROM chronos_runs r
            JOIN unnest(${fires.map((f) => f.runId)}::text[], ${fires.map((f) => f.at.toISOString())}::timestamptz[])
                 AS f(id, at) ON r.id = f.id AND r.next_fire_at = f.at
           ORDER BY r.id
             FOR UPDATE OF r`;
        if (!rows.length) return [];
        const planned = rows.map((row) => {
          const run = runOfRaw(row);
          const at = row.next_fire_at!;
          return { run, at, ...plan(run, at) };
        });
        const executions = planned.filter((p) => p.executionId);
        // The unique (run_id, scheduled_for) makes a second delivery of a fire record nothing.
        const recorded = new Set<string>();
        if (executions.length) {
          const inserted = await tx.$queryRaw<{ id: string }[]>`
            INSERT INTO chronos_executions (id, run_id, account_id, trigger, scheduled_for, steps)
            SELECT e.id, e.run_id, e.account_id, 'schedule', e.at, e.steps
              FROM unnest(
                ${executions.map((p) => p.executionId!)}::text[],
                ${executions.map((p) => p.run.id)}::text[],
                ${executions.map((p) => p.run.accountId)}::text[],
                ${executions.map((p) => p.at.toISOString())}::timestamptz[],
                ${executions.map((p) => JSON.stringify(p.run.steps))}::jsonb[]
              ) AS e(id, run_id, account_id, at, steps)
            ON CONFLICT (run_id, scheduled_for) DO NOTHING
            RETURNING id`;
          for (const r of inserted) recorded.add(r.id);
        }
        await tx.$executeRaw`
          UPDATE chronos_runs r SET next_fire_at = v.next
            FROM unnest(${planned.map((p) => p.run.id)}::text[], ${planned.map((p) => p.next?.toISOString() ?? null)}::timestamptz[])
                 AS v(id, next)
           WHERE r.id = v.id`;
        const fired: Fired[] = planned.map((p) => ({
          run: p.run,
          at: p.at,
          executionId: p.executionId && recorded.has(p.executionId) ? p.executionId : null,
          next: p.next,
        }));
        await enqueue(txSql(tx), fired);
        return fired;
      });
    },
    async queueManual(run, executionId, enqueue) {
      return prisma.$transaction(async (tx) => {
        const row = await tx.chronosExecution.create({
          data: {
            id: executionId,
            runId: run.id,
            accountId: run.accountId,
            trigger: 'manual',
            steps: json(run.steps),
          },
        });
        await enqueue(txSql(tx));
        return executionOf(row);
      });
    },
    async claim(id, worker) {
      // One round trip when claimed (the common case): the update returns the row.
      try {
        const row = await prisma.chronosExecution.update({
          where: { id, status: 'queued' },
          data: { status: 'running', startedAt: new Date(), attempts: { increment: 1 }, worker },
        });
        return { claimed: true, execution: executionOf(row) };
      } catch (err) {
        if ((err as { code?: string }).code !== 'P2025') throw err;
      }
      const row = await prisma.chronosExecution.findUnique({ where: { id } });
      return { claimed: false, execution: row ? executionOf(row) : null };
    },
    async progress(id, attempt, results, cost) {
      await prisma.chronosExecution.updateMany({
        where: { id, status: 'running', attempts: attempt },
        data: { results: json(results), cost },
      });
    },
    async finish(id, end, attempt) {
      const { count } = await prisma.chronosExecution.updateMany({
        where: {
          id,
          status: { in: ['queued', 'running'] },
          ...(attempt !== undefined ? { attempts: attempt } : {}),
        },
        data: {
          status: end.status,
          reason: end.reason,
          endedAt: new Date(),
          ...(end.results ? { results: json(end.results) } : {}),
          ...(end.cost !== undefined ? { cost: end.cost } : {}),
        },
      });
      return count > 0;
    },
    async executions(accountId, runId, limit) {
      const rows = await prisma.chronosExecution.findMany({
        where: { runId, accountId },
        orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
        take: limit,
      });
      return rows.map(executionOf);
    },
    async execution(id) {
      const row = await prisma.chronosExecution.findUnique({ where: { id } });
      return row ? executionOf(row) : null;
    },
  };
}
