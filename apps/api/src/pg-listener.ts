// One dedicated PostgreSQL connection that LISTENs on some channels and comes back on its own:
// when it drops, `onLost` is told (notifications may have been missed meanwhile) and it reconnects
// with back-off (250 ms, doubling up to 10 s). The key revocation bus and billing's events use it.
import pg from 'pg';

export interface PgListener {
  /** The connection while it is up (it may also be used to send), else undefined. */
  readonly client: pg.Client | undefined;
  close(): Promise<void>;
}

export async function pgListener(options: {
  url: string;
  /** Shown in pg_stat_activity (the revocation bus counts its peers by it). */
  applicationName: string;
  channels: readonly string[];
  onNotification(msg: pg.Notification, client: pg.Client): void;
  /** The connection dropped: whatever was learnt from notifications may be stale. */
  onLost(err: Error | undefined): void;
  /** Connected again after a drop. */
  onReconnected?(): void;
}): Promise<PgListener> {
  let client: pg.Client | undefined;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;
  let backoff = 250;

  const connect = async () => {
    const c = new pg.Client({
      connectionString: options.url,
      application_name: options.applicationName,
      connectionTimeoutMillis: 5_000,
    });
    c.on('error', (err) => lost(c, err));
    c.on('end', () => lost(c));
    c.on('notification', (msg) => options.onNotification(msg, c));
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
    get client() {
      return client;
    },
    async close() {
      closed = true;
      clearTimeout(retry);
      const c = client;
      client = undefined;
      await c?.end().catch(() => {});
    },
  };
}
