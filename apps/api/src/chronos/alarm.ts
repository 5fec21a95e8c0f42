// Wakes the Chronos workers at the due times of their delayed jobs, so that they need not poll often.
//
// pg-boss hands out a delayed job (`startAfter`) to the first worker that polls after it is due.
// Polling every second for that cost each idle API replica a database transaction a second per
// queue. Instead the fire and pre-warm workers poll every CHRONOS_POLL_SECONDS (30 by default) and, on
// the same beat, each replica looks up the due times of the next beat and a bit more (one query) and
// sets a timer for each distinct one; the timer wakes pg-boss's worker (notifyWorker), which fetches
// as usual (SKIP LOCKED: one replica gets each job). A fire queued by this replica is armed at once.
// Each due time is armed twice, just after it and a second later, in case the database's clock runs
// a little behind this one; beyond that the poll is the backstop (a replica that died before its
// fire, a clock skewed by more than a second).
import type { Logger } from 'pino';

interface Db {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

export interface DueAlarm {
  /** Wakes the worker of `queue` when a job due at `at` (epoch ms) becomes due. */
  arm(queue: string, at: number): void;
  close(): void;
}

export function dueAlarm(o: {
  db: Db;
  schema: string;
  /** Queue name → the pg-boss worker to wake. */
  workers: ReadonlyMap<string, string>;
  notify(workerId: string): void;
  intervalMs: number;
  logger: Logger;
}): DueAlarm {
  const lookaheadMs = o.intervalMs + 5_000;
  const timers = new Map<string, NodeJS.Timeout>();
  let closed = false;

  const arm = (queue: string, at: number) => {
    const worker = o.workers.get(queue);
    if (!worker || closed) return;
    const wait = at - Date.now();
    if (wait > lookaheadMs) return; // a later look-ahead arms it
    for (const extra of [20, 1_000]) {
      const key = `${queue}@${at + extra}`;
      if (timers.has(key)) continue;
      const timer = setTimeout(
        () => {
          timers.delete(key);
          o.notify(worker);
        },
        Math.max(0, wait + extra),
      );
      timer.unref();
      timers.set(key, timer);
    }
  };

  const lookAhead = async () => {
    const { rows } = await o.db.executeSql(
      `SELECT name, start_after FROM ${o.schema}.job
        WHERE name = ANY($1::text[]) AND state IN ('created', 'retry')
          AND start_after < now() + make_interval(secs => $2)
        GROUP BY name, start_after LIMIT 10000`,
      [[...o.workers.keys()], lookaheadMs / 1000],
    );
    for (const r of rows as { name: string; start_after: Date | string }[])
      arm(r.name, new Date(r.start_after).getTime());
  };
  const beat = () =>
    void lookAhead().catch((err: unknown) =>
      o.logger.warn({ err: (err as Error).message }, 'chronos: could not look up the next due jobs'),
    );
  const interval = setInterval(beat, o.intervalMs);
  interval.unref();
  beat();

  return {
    arm,
    close() {
      closed = true;
      clearInterval(interval);
      for (const t of timers.values()) clearTimeout(t);
      timers.clear();
    },
  };
}
