// One leader among the API replicas, by a PostgreSQL session advisory lock on a connection of its
// own: the GPU meter runs on exactly one replica. The lock lives as long as the session, so a replica
// that dies (SIGKILL included) loses it as soon as PostgreSQL sees its connection close, and a
// standby, which tries every `retryMs`, takes over. The leader pings its connection at the same pace
// and stops leading the moment the ping fails (then tries again on a new connection).
import pg from 'pg';
import type { Logger } from 'pino';

/** What runs while leading; returns how to stop it. */
export type LeaderWork = () => Promise<() => Promise<void>>;

export interface Leadership {
  readonly leading: boolean;
  /** Stops the work if leading, releases the lock, closes the connection. */
  close(): Promise<void>;
}

/** Advisory lock keys of Berth (two int4 keys: Berth's namespace, then the role). */
export const LOCK_NAMESPACE = 0x6265_7274; // "bert"
export const GPU_METER_LOCK = 1;

export function pgLeadership(options: {
  url: string;
  lock: number;
  name: string;
  work: LeaderWork;
  logger: Logger;
  retryMs?: number;
  onChange?: (leading: boolean) => void;
}): Leadership {
  const retryMs = options.retryMs ?? 2_000;
  const log = options.logger.child({ leadership: options.name });
  let client: pg.Client | undefined;
  let stopWork: (() => Promise<void>) | undefined;
  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();

  const resign = async (why: string) => {
    const c = client;
    client = undefined;
    c?.end().catch(() => {});
    if (!stopWork) return;
    const stop = stopWork;
    stopWork = undefined;
    options.onChange?.(false);
    log.warn({ why }, 'no longer leading');
    await stop().catch((err: unknown) => log.error({ err }, 'stopping the leader work failed'));
  };

  const tick = async () => {
    try {
      if (!client) {
        const c = new pg.Client({ connectionString: options.url, application_name: `berth-${options.name}` });
        c.on('error', () => {}); // a dropped connection shows as a failed query below
        await c.connect();
        client = c;
      }
      if (stopWork) {
        await client.query('SELECT 1');
        return;
      }
      const { rows } = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS ok', [
        LOCK_NAMESPACE,
        options.lock,
      ]);
      if (!rows[0]?.ok || closed) return;
      stopWork = await options.work();
      options.onChange?.(true);
      log.info('leading');
    } catch (err) {
      await resign(String(err));
    }
  };

  const loop = () => {
    if (closed) return;
    running = tick().finally(() => {
      if (!closed) timer = setTimeout(loop, retryMs);
    });
  };
  loop();

  return {
    get leading() {
      return stopWork !== undefined;
    },
    async close() {
      closed = true;
      clearTimeout(timer);
      await running;
      if (stopWork) {
        const stop = stopWork;
        stopWork = undefined;
        options.onChange?.(false);
        await stop().catch((err: unknown) => log.error({ err }, 'stopping the leader work failed'));
      }
      const c = client;
      client = undefined;
      await c?.end().catch(() => {}); // ends the session: the lock goes with it
    },
  };
}

/** The embedded database has one process: it always leads. */
export function soleLeadership(work: LeaderWork, logger: Logger): Leadership {
  const stop = work().catch((err: unknown) => {
    logger.error({ err }, 'the leader work failed to start');
    return async () => {};
  });
  return {
    leading: true,
    close: async () => (await stop)(),
  };
}
