// One Berth API per database for work that must never run twice: a PostgreSQL session advisory lock
// taken at start-up on a connection of its own and held for the life of the process. A second API
// that asks for it is told who holds it (the holder names itself in pg_stat_activity), so start-up can
// refuse in one line. The lock goes with the session: an API that stops, or is killed, frees it as
// soon as PostgreSQL sees its connection close. A connection lost while running (a database restart)
// is reconnected and the lock taken again; if another API took it meanwhile, that is logged as an
// error (and retried until it is free again).
import os from 'node:os';
import pg from 'pg';
import type { Logger } from './logger.ts';

export interface InstanceLock {
  /** Ends the session: the lock goes with it. */
  release(): Promise<void>;
}

/** Who holds a lock, as its holder named itself: `pid 123 on host web-1`, or null when unknown. */
export type Holder = string | null;

const PREFIX = 'berth-';

/** The holder's name in pg_stat_activity (application_name is at most 63 bytes). */
function applicationName(role: string): string {
  return `${PREFIX}${role}:${process.pid}:${os.hostname()}`.slice(0, 63);
}

function holderOf(name: string, role: string): Holder {
  const m = new RegExp(`^${PREFIX}${role}:(\\d+):(.*)$`).exec(name);
  return m ? `pid ${m[1]} on host ${m[2]}` : null;
}

async function connect(url: string, name: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url, application_name: name, keepAlive: true });
  c.on('error', () => {}); // a dropped connection is seen by 'end'
  await c.connect();
  return c;
}

async function tryLock(c: pg.Client, namespace: number, key: number): Promise<boolean> {
  const { rows } = await c.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS ok', [
    namespace,
    key,
  ]);
  return rows[0]?.ok === true;
}

async function holder(c: pg.Client, namespace: number, key: number, role: string): Promise<Holder> {
  const { rows } = await c.query<{ name: string }>(
    `SELECT a.application_name AS name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::int::oid AND l.objid = $2::int::oid
        AND l.objsubid = 2 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    [namespace, key],
  );
  return rows[0] ? holderOf(rows[0].name, role) : null;
}

/**
 * Takes the lock (`namespace`, `key`) for this process, or says who holds it. `role` names the
 * holder's connection (`berth-<role>:<pid>:<host>`).
 */
export async function takeInstanceLock(o: {
  url: string;
  namespace: number;
  key: number;
  role: string;
  logger: Logger;
  retryMs?: number;
}): Promise<{ lock: InstanceLock } | { heldBy: Holder }> {
  const name = applicationName(o.role);
  const first = await connect(o.url, name);
  try {
    if (!(await tryLock(first, o.namespace, o.key)))
      return { heldBy: await holder(first, o.namespace, o.key, o.role).finally(() => first.end()) };
  } catch (err) {
    await first.end().catch(() => {});
    throw err;
  }
  let client: pg.Client | undefined = first;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;
  const log = o.logger.child({ lock: o.role });

  let told = false; // the error is logged once per lost connection, not every retry
  const again = async () => {
    retry = undefined;
    if (closed) return;
    try {
      const c = await connect(o.url, name);
      const taken = await tryLock(c, o.namespace, o.key).catch(() => false);
      if (taken && !closed) {
        client = c;
        c.once('end', () => lost(c));
        log.info('database connection back: lock taken again');
        return;
      }
      const by = taken || closed ? null : await holder(c, o.namespace, o.key, o.role).catch(() => null);
      await c.end().catch(() => {});
      if (closed) return;
      if (!told)
        log.error(
          { heldBy: by },
          'another Berth API took this lock while our database connection was down: stop one of them',
        );
      told = true;
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'could not reconnect to take the lock again');
    }
    retry = setTimeout(() => void again(), o.retryMs ?? 2_000);
  };
  const lost = (c: pg.Client) => {
    if (client !== c || closed) return;
    client = undefined;
    told = false;
    log.warn('the connection holding the lock was lost; taking it again');
    retry = setTimeout(() => void again(), o.retryMs ?? 2_000);
  };
  first.once('end', () => lost(first));

  return {
    lock: {
      async release() {
        closed = true;
        clearTimeout(retry);
        const c = client;
        client = undefined;
        await c?.end().catch(() => {});
      },
    },
  };
}
