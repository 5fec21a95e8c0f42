// The Postgres-backed job queue every scheduled piece of Berth runs on (weekly invoices now,
// Chronos runs next): pg-boss 12, in its own `pgboss` schema of the API's database. A scheduled
// job is sent once per occurrence whatever the number of API replicas (pg-boss's cron pass holds
// an advisory lock and records the last occurrence it sent) and handled by one of them (jobs are
// claimed with SKIP LOCKED); a replica killed while handling one leaves it to expire and be
// retried. On the embedded database it runs on PGlite through pg-boss's own adapter.
import type { PGlite } from '@electric-sql/pglite';
import { fromPglite, PgBoss, type SendOptions } from 'pg-boss';
import type { Logger } from 'pino';
import { databaseUnavailable } from './db-unavailable.ts';

export type QueueDatabase = { kind: 'postgres'; url: string } | { kind: 'embedded'; pglite: PGlite };

export interface JobQueue {
  /**
   * A recurring job, in UTC unless `tz` says otherwise; one queue may carry several schedules told
   * apart by `key` (each with its `data`). pg-boss sends at most one job per schedule a minute.
   * Occurrences missed while no replica ran are sent once when one starts again (`missed: 'once'`):
   * handlers must read the state of the world, not assume one run per occurrence.
   */
  schedule<T extends object>(
    name: string,
    cron: string,
    handler: (data: T) => Promise<void>,
    options?: { tz?: string; key?: string; data?: T },
  ): Promise<void>;
  /** Handles jobs sent to `name`, one at a time on this replica. */
  work<T extends object>(name: string, handler: (data: T) => Promise<void>): Promise<void>;
  send(name: string, data?: object, options?: SendOptions): Promise<string | null>;
  /** pg-boss itself, for what the methods above do not cover. */
  readonly boss: PgBoss;
  /** Stops fetching, lets handlers that are running finish (bounded), closes its connections. */
  stop(): Promise<void>;
}

export const JOBS_SCHEMA = 'pgboss';

export async function startJobQueue(
  db: QueueDatabase,
  logger: Logger,
  options: {
    stopTimeoutMs?: number;
    pollingIntervalSeconds?: number;
    /** How often schedules are checked (pg-boss's cronWorkerIntervalSeconds; tests use 1). */
    cronIntervalSeconds?: number;
    /** How often jobs' heartbeats and expiry are checked (pg-boss's monitorIntervalSeconds). */
    monitorIntervalSeconds?: number;
  } = {},
): Promise<JobQueue> {
  // Idle database traffic: every pg-boss loop is a transaction per beat on each replica. Schedules
  // here are hourly or weekly, so the cron worker checks every 30 s (pg-boss: 5); flows (job
  // dependencies) are not used, so their loop runs every 5 minutes (pg-boss: 5 s).
  const common = {
    schema: JOBS_SCHEMA,
    cronWorkerIntervalSeconds: options.cronIntervalSeconds ?? 30,
    flowIntervalSeconds: 300,
    ...(options.monitorIntervalSeconds
      ? {
          monitorIntervalSeconds: options.monitorIntervalSeconds,
          superviseIntervalSeconds: options.monitorIntervalSeconds,
        }
      : {}),
  };
  const boss =
    db.kind === 'postgres'
      ? // LISTEN/NOTIFY: a job sent to a queue created with `notify` wakes the workers at once.
        new PgBoss({
          ...common,
          connectionString: db.url,
          max: 3,
          application_name: 'berth-jobs',
          useListenNotify: true,
        })
      : new PgBoss({ ...common, db: fromPglite(db.pglite), backend: 'pglite' });
  // pg-boss reports every failed poll and maintenance pass: while the database is unreachable that
  // is several errors a second, so an outage is logged once a minute at most (with how many were
  // left out); any other error is logged each time.
  let outageLoggedAt = 0;
  let outageQuiet = 0;
  boss.on('error', (err: unknown) => {
    const reason = databaseUnavailable(err);
    if (!reason) return logger.error({ err }, 'job queue error');
    const now = Date.now();
    if (now - outageLoggedAt < 60_000) return void outageQuiet++;
    logger.warn({ reason, repeats: outageQuiet }, 'job queue: the database is unavailable; jobs wait for it');
    outageLoggedAt = now;
    outageQuiet = 0;
  });
  await boss.start();

  const created = new Set<string>();
  // On PostgreSQL a job sent to a queue (by send() or a schedule) wakes its workers at once
  // (LISTEN/NOTIFY), so they poll only every 30 s as a backstop instead of every 2 s.
  const notify = db.kind === 'postgres';
  const queue = async (name: string) => {
    if (created.has(name)) return;
    await boss.createQueue(name, { notify });
    if (notify) await boss.updateQueue(name, { notify }); // a queue created by an older version
    created.add(name);
  };
  const working = new Set<string>();
  const work = async <T extends object>(name: string, handler: (data: T) => Promise<void>) => {
    await queue(name);
    if (working.has(name)) return;
    working.add(name);
    // One job per fetch, and a worker that was woken several times while it ran a job fetches only
    // once more: without a nudge, the rest of a burst of sends would wait for the 30 s backstop
    // poll. A worker that got a job fetches again at once, until a fetch comes back empty.
    let workerId = '';
    workerId = await boss.work<T>(
      name,
      { pollingIntervalSeconds: options.pollingIntervalSeconds ?? 2 },
      async (jobs) => {
        try {
          for (const job of jobs) {
            const started = Date.now();
            try {
              await handler(job.data);
              logger.info({ job: name, id: job.id, ms: Date.now() - started }, 'job done');
            } catch (err) {
              logger.error({ err, job: name, id: job.id }, 'job failed; pg-boss will retry it');
              throw err;
            }
          }
        } finally {
          if (jobs.length > 0) boss.notifyWorker(workerId);
        }
      },
    );
  };

  return {
    boss,
    async schedule(name, cron, handler, scheduleOptions = {}) {
      await work(name, handler);
      await boss.schedule(name, cron, scheduleOptions.data ?? null, {
        tz: scheduleOptions.tz ?? 'UTC',
        missed: 'once',
        ...(scheduleOptions.key ? { key: scheduleOptions.key } : {}),
      });
    },
    work,
    async send(name, data, sendOptions) {
      await queue(name);
      return boss.send(name, data ?? null, sendOptions ?? {});
    },
    async stop() {
      await boss.stop({ graceful: true, timeout: options.stopTimeoutMs ?? 10_000, close: true });
    },
  };
}
