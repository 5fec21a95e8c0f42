// Data access for Chronos runs and their executions (Prisma only here). A run's next fire is its
// next_fire_at and its pre-warm its prewarm_at, saved with it; the queue statements (fires, claims,
// heartbeats) are in ./queue-repository.ts.
import type { Prisma, PrismaClient } from '@berth/db';
import type { ExecutionRecord, FirstChoice, Prewarm, RunRecord, StepResult } from './records.ts';
import { CHANNEL } from './queue-repository.ts';
import type { Step } from './steps.ts';

export type { ExecutionRecord, ExecutionStatus, Prewarm, RunRecord, StepResult } from './records.ts';

export interface ChronosRepository {
  /**
   * Saves the run (its next fire pending from then) unless the account already has as many
   * runs as its quota: its own override (accounts.quota_chronos_runs), else `defaultLimit`. The
   * account's row is locked meanwhile, so creations at once cannot pass the quota together.
   */
  create(
    run: Omit<RunRecord, 'createdAt' | 'updatedAt'> & Prewarm,
    defaultLimit: number,
  ): Promise<{ created: true; run: RunRecord } | { created: false; count: number; limit: number }>;
  get(accountId: string, id: string): Promise<RunRecord | null>;
  /** Any account's run (job handlers, which have only its id). */
  find(id: string): Promise<RunRecord | null>;
  /** How many runs the account has (its Chronos runs quota's usage). */
  count(accountId: string): Promise<number>;
  /**
   * Up to `limit` of the account's runs, oldest first, after the run `after`; null when the account
   * has no run `after`.
   */
  page(accountId: string, page: { limit: number; after?: string }): Promise<RunRecord[] | null>;
  /**
   * Null when the account has no such run. `prewarm`: the pre-warm of the run's next fire (as it is
   * once patched), computed with the row locked; absent: left as it is.
   */
  update(
    accountId: string,
    id: string,
    patch: Partial<Pick<RunRecord, 'name' | 'schedule' | 'timezone' | 'steps' | 'nextFireAt'>>,
    prewarm?: (nextFireAt: Date | null) => Date | null,
  ): Promise<(RunRecord & Prewarm) | null>;
  delete(accountId: string, id: string): Promise<RunRecord | null>;
  /**
   * A manual trigger's execution, queued (with step 0's `auto` choice, when the trigger made one);
   * every replica is told (NOTIFY) when it commits.
   */
  queueManual(run: RunRecord, executionId: string, first?: FirstChoice): Promise<ExecutionRecord>;
  /** Progress of a running attempt (the results so far). */
  progress(id: string, attempt: number, results: StepResult[], cost: bigint): Promise<void>;
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

const json = (v: unknown) => v as Prisma.InputJsonValue;

export function chronosRepository(prisma: PrismaClient): ChronosRepository {
  return {
    async create(run, defaultLimit) {
      return prisma.$transaction(async (tx) => {
        const [account] = await tx.$queryRaw<{ quota_chronos_runs: number | null }[]>`
          SELECT quota_chronos_runs FROM accounts WHERE id = ${run.accountId} FOR UPDATE`;
        const limit = account?.quota_chronos_runs ?? defaultLimit;
        const count = await tx.chronosRun.count({ where: { accountId: run.accountId } });
        if (count >= limit) return { created: false as const, count, limit };
        const row = await tx.chronosRun.create({ data: { ...run, steps: json(run.steps) } });
        return { created: true as const, run: runOf(row) };
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
    count(accountId) {
      return prisma.chronosRun.count({ where: { accountId } });
    },
    async page(accountId, { limit, after }) {
      if (after && (await prisma.chronosRun.count({ where: { id: after, accountId } })) === 0) return null;
      const rows = await prisma.chronosRun.findMany({
        where: { accountId },
        // The id breaks ties between runs created in the same millisecond: pages never overlap.
        orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
        take: limit,
        ...(after ? { cursor: { id: after }, skip: 1 } : {}),
      });
      return rows.map(runOf);
    },
    async update(accountId, id, patch, prewarm) {
      return prisma.$transaction(async (tx) => {
        const [locked] = await tx.$queryRaw<{ next_fire_at: Date | null }[]>`
          SELECT next_fire_at FROM chronos_runs WHERE id = ${id} AND account_id = ${accountId} FOR UPDATE`;
        if (!locked) return null;
        const { steps, ...rest } = patch;
        const next = patch.nextFireAt !== undefined ? patch.nextFireAt : locked.next_fire_at;
        const row = await tx.chronosRun.update({
          where: { id },
          data: {
            ...rest,
            ...(steps ? { steps: json(steps) } : {}),
            ...(prewarm ? { prewarmAt: prewarm(next) } : {}),
            updatedAt: new Date(),
          },
        });
        return { ...runOf(row), prewarmAt: row.prewarmAt };
      });
    },
    async delete(accountId, id) {
      const row = await prisma.chronosRun.findFirst({ where: { id, accountId } });
      if (!row) return null;
      const { count } = await prisma.chronosRun.deleteMany({ where: { id, accountId } });
      return count ? runOf(row) : null;
    },
    async queueManual(run, executionId, first) {
      return prisma.$transaction(async (tx) => {
        const row = await tx.chronosExecution.create({
          data: {
            id: executionId,
            runId: run.id,
            accountId: run.accountId,
            trigger: 'manual',
            steps: json(run.steps),
            ...(first ? { firstChoice: json(first) } : {}),
          },
        });
        await tx.$executeRaw`SELECT pg_notify(${CHANNEL}, 'queued')`;
        return executionOf(row);
      });
    },
    async progress(id, attempt, results, cost) {
      await prisma.chronosExecution.updateMany({
        where: { id, status: 'running', attempts: attempt },
        data: { results: json(results), cost },
      });
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
