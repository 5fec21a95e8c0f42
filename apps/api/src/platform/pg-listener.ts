// One dedicated PostgreSQL connection that LISTENs on some channels and comes back on its own:
// when it drops, `onLost` is told (notifications may have been missed meanwhile) and it reconnects
// with back-off (250 ms, doubling up to 10 s). The key revocation bus, the catalog and billing's
// events use it.
//
// What is sent (NOTIFY, acknowledgements, lookups) goes through a connection of its own, never the
// listening one: a notification handler that answers while a sender's query is running would use one
// pg.Client for two queries at once, which node-postgres warns about ("Calling client.query() when the
// client is already executing a query") and pg 9 refuses. The sending pool has one connection, opened
// on the first send and closed after a minute idle, so statements are sent one at a time, in order.
import pg from 'pg';

/** Sends statements on the listener's sending connection (one at a time, in order). */
export interface PgSender {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

export interface PgListener extends PgSender {
  /** Whether the listening connection is up (notifications arrive). */
  readonly listening: boolean;
  close(): Promise<void>;
}

/** The sending connection's name in pg_stat_activity (not the listener's: peers are counted by that). */
export const SENDER_APPLICATION_NAME = 'berth-send';

export async function pgListener(options: {
  url: string;
  /** Shown in pg_stat_activity (the revocation bus counts its peers by it). */
  applicationName: string;
  channels: readonly string[];
  /** `send`: answer on the sending connection (never query the listening one). */
  onNotification(msg: pg.Notification, send: PgSender): void;
  /** The connection dropped: whatever was learnt from notifications may be stale. */
  onLost(err: Error | undefined): void;
  /** Connected again after a drop. */
  onReconnected?(): void;
}): Promise<PgListener> {
  let client: pg.Client | undefined;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;
  let backoff = 250;
  const pool = new pg.Pool({
    connectionString: options.url,
    application_name: SENDER_APPLICATION_NAME,
    max: 1,
    idleTimeoutMillis: 60_000,
    connectionTimeoutMillis: 5_000,
  });
  pool.on('error', () => {}); // an idle sending connection that drops: the next send opens another
  const send: PgSender = {
    query: <R extends pg.QueryResultRow>(text: string, values?: unknown[]) => pool.query<R>(text, values),
  };

  const connect = async () => {
    const c = new pg.Client({
      connectionString: options.url,
      application_name: options.applicationName,
      connectionTimeoutMillis: 5_000,
    });
    c.on('error', (err) => lost(c, err));
    c.on('end', () => lost(c));
    c.on('notification', (msg) => options.onNotification(msg, send));
    await c.connect();
    for (const channel of options.channels) await c.query(`LISTEN ${channel}`);
    client = c;
    backoff = 250;
  };

  const lost = (c: pg.Client, err?: Error) => {
    if (client !== c) return;
    client = undefined;
    c.end().catch(() => {});
    if (closed) return;
    options.onLost(err);
    scheduleReconnect();
  };

  const scheduleReconnect = () => {
    retry = setTimeout(() => {
      connect()
        .then(() => options.onReconnected?.())
        .catch(() => {
          backoff = Math.min(backoff * 2, 10_000);
          if (!closed) scheduleReconnect();
        });
    }, backoff);
    retry.unref();
  };

  await connect();
  return {
    get listening() {
      return client !== undefined;
    },
    query: send.query,
    async close() {
      closed = true;
      clearTimeout(retry);
      const c = client;
      client = undefined;
      await c?.end().catch(() => {});
      await pool.end().catch(() => {});
    },
  };
}
