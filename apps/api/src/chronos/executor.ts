// This replica's executions: up to CHRONOS_CONCURRENCY at once, claimed from the executions table
// (./queue-repository.ts claim: one statement for as many as there are free slots) and ended through
// one writer that records every end ready at the time in one statement. Nothing polls: a claim is
// made when executions were queued (by a fire on this replica, a NOTIFY from another one, a manual
// trigger, the beat's backstop look) or, while a backlog remains, when a slot frees. Claims and ends
// are one at a time each, so under load the slots that free while one is in flight are claimed, and
// the ends ready meanwhile written, together by the next.
import type { Logger } from 'pino';
import { databaseUnavailable } from '../platform/db-unavailable.ts';
import type { ClaimedExecution, ChronosQueueRepository, ExecutionEnd } from './queue-repository.ts';

/** Between tries of writing ends while the database cannot be reached: doubling up to the last. */
const END_RETRY_MS = [250, 500, 1_000, 2_000, 5_000];

export interface Executor {
  /** Executions may be queued: claim as many as there are free slots. */
  wake(): void;
  /** The executions running here (their heartbeats). */
  running(): string[];
  /** Ends an execution (in `attempt`); written with the other ends ready at the time. */
  finish(id: string, end: ExecutionEnd, attempt: number): Promise<boolean>;
  /** Stops claiming; waits (at most `timeoutMs`) for the executions running to be ended. */
  close(timeoutMs: number): Promise<void>;
}

export function executor(ctx: {
  repo: Pick<ChronosQueueRepository, 'claim' | 'finish'>;
  /** This replica's name in the executions it claims. */
  worker: string;
  concurrency: number;
  /** Starts a claimed batch: one promise per execution, settled when it has ended. */
  run(batch: readonly ClaimedExecution[]): Promise<void>[];
  logger: Logger;
  /** Waits between tries of an end's write (tests shorten it). */
  sleep?: (ms: number) => Promise<void>;
}): Executor {
  const { repo, logger } = ctx;
  const running = new Map<string, Promise<void>>();
  let claiming = false;
  let again = false;
  /** The last claim filled every free slot: more may be queued. */
  let backlog = false;
  let closed = false;

  const claim = async () => {
    claiming = true;
    try {
      do {
        again = false;
        const free = ctx.concurrency - running.size;
        if (free <= 0) {
          backlog = true;
          break;
        }
        const batch = await repo.claim(ctx.worker, free);
        backlog = batch.length === free;
        start(batch);
      } while (again && !closed);
    } catch (err) {
      logger.error({ err }, 'chronos: could not claim queued executions; the next look retries');
    } finally {
      claiming = false;
    }
  };
  const wake = () => {
    if (closed) return;
    if (claiming) again = true;
    else void claim();
  };

  const start = (batch: readonly ClaimedExecution[]) => {
    const runs = ctx.run(batch);
    batch.forEach((claimed, i) => {
      const { id, attempts } = claimed.execution;
      const done = runs[i]!.catch(async (err: unknown) => {
        logger.error({ err, execution: id }, 'chronos execution failed on Berth’s side');
        await finish(
          id,
          { status: 'failed', reason: `Chronos could not run the execution: ${(err as Error).message}` },
          attempts,
        ).catch(() => {});
      }).finally(() => {
        running.delete(id);
        if (backlog) wake();
      });
      running.set(id, done);
    });
  };

  // Ends, written together: each waits for the statement that carries it. While the database cannot
  // be reached the same ends are written again (an execution whose steps ran must not be recorded as
  // failed by Berth because its end could not be written at once): until it is back, or until the
  // replica closes. The write names the attempt, so an execution another replica has meanwhile
  // marked Interrupted is not ended twice.
  let pending: { id: string; end: ExecutionEnd; attempt: number; settle(ok: boolean | Error): void }[] = [];
  let writing = false;
  const sleep = ctx.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref()));
  const write = async () => {
    writing = true;
    let tries = 0;
    while (pending.length) {
      const ends = pending;
      pending = [];
      try {
        const ended = await repo.finish(ends);
        tries = 0;
        for (const e of ends) e.settle(ended.has(e.id));
      } catch (err) {
        if (databaseUnavailable(err) && !closed) {
          if (tries === 0)
            logger.warn(
              { executions: ends.length, err: (err as Error).message },
              'chronos: could not record how executions ended; retrying until the database is back',
            );
          pending = [...ends, ...pending];
          await sleep(END_RETRY_MS[Math.min(tries++, END_RETRY_MS.length - 1)]!);
          continue;
        }
        for (const e of ends) e.settle(err as Error);
      }
    }
    writing = false;
  };
  const finish = (id: string, end: ExecutionEnd, attempt: number) =>
    new Promise<boolean>((resolve, reject) => {
      pending.push({ id, end, attempt, settle: (ok) => (ok instanceof Error ? reject(ok) : resolve(ok)) });
      if (!writing) void write();
    });

  return {
    wake,
    running: () => [...running.keys()],
    finish,
    async close(timeoutMs) {
      closed = true;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.allSettled(running.values()),
        new Promise((r) => (timer = setTimeout(r, timeoutMs))),
      ]);
      clearTimeout(timer);
    },
  };
}
