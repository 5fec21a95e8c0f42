// How a revocation reaches every API replica before DELETE /api/keys/{id} returns.
//
// Each replica holds one dedicated connection that LISTENs on `berth_key_revoked`, named
// `berth-api:<replica>` in pg_stat_activity. The revoking replica commits, counts the live
// listeners, NOTIFYs, and waits (bounded) until each has evicted the key and acknowledged on
// `berth_key_revoked_ack`. A replica whose listening connection is down cannot hear revocations,
// so it reports itself unhealthy and its key cache is bypassed until the connection is back.
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import { pgListener } from '../../platform/pg-listener.ts';

/** A key revoked, or (`kind: 'changed'`) changed or rotated: every replica drops its copy. */
export interface Revocation {
  keyId: string;
  hash: string;
  /** Absent: revoked (calls in flight with it end too). */
  kind?: 'changed';
}

export interface RevocationBus {
  /** False while this replica might miss a revocation: its key cache must not be trusted. */
  readonly healthy: boolean;
  publish(rev: Revocation): Promise<{ expected: number; acknowledged: number }>;
  /** Called for every revocation and change, this replica's own included. */
  onRevoked(fn: (rev: Revocation) => void): void;
  /** Called when the bus may have missed revocations (connection lost): drop every cached key. */
  onReset(fn: () => void): void;
  /**
   * Called when the bus listens again after a loss: what changed meanwhile was missed, so what was
   * learnt before the loss is read again now (billing's key limits; the key cache refills itself).
   */
  onReconnected(fn: () => void): void;
  close(): Promise<void>;
}

/** A single process (the embedded database allows no other): revocations are local calls. */
export function localRevocationBus(): RevocationBus {
  const events = new EventEmitter();
  return {
    healthy: true,
    async publish(rev) {
      events.emit('revoked', rev);
      return { expected: 1, acknowledged: 1 };
    },
    onRevoked: (fn) => void events.on('revoked', fn),
    onReset: (fn) => void events.on('reset', fn),
    onReconnected: (fn) => void events.on('reconnected', fn),
    async close() {
      events.removeAllListeners();
    },
  };
}

const CHANNEL = 'berth_key_revoked';
const ACK_CHANNEL = 'berth_key_revoked_ack';
const APP_PREFIX = 'berth-api:';

export async function postgresRevocationBus(options: {
  url: string;
  ackTimeoutMs: number;
  logger: Logger;
}): Promise<RevocationBus> {
  const replica = randomBytes(6).toString('hex');
  const events = new EventEmitter();
  const waiters = new Map<string, { pending: Set<string>; done: () => void }>();

  const listener = await pgListener({
    url: options.url,
    applicationName: APP_PREFIX + replica,
    channels: [CHANNEL, ACK_CHANNEL],
    onNotification(msg, send) {
      if (!msg.payload) return;
      try {
        const body = JSON.parse(msg.payload) as Record<string, string>;
        if (msg.channel === CHANNEL) {
          if (body.keyId && body.hash)
            events.emit('revoked', {
              keyId: body.keyId,
              hash: body.hash,
              ...(body.kind === 'changed' ? { kind: 'changed' as const } : {}),
            } satisfies Revocation);
          void send
            .query('SELECT pg_notify($1, $2)', [ACK_CHANNEL, JSON.stringify({ id: body.id, replica })])
            .catch(() => {});
        } else if (msg.channel === ACK_CHANNEL && body.id && body.replica) {
          const w = waiters.get(body.id);
          if (w && w.pending.delete(body.replica) && w.pending.size === 0) w.done();
        }
      } catch (err) {
        options.logger.warn({ err, channel: msg.channel }, 'ignored a malformed key revocation notification');
      }
    },
    onLost(err) {
      // We may have missed revocations while disconnected: nothing cached can be trusted.
      events.emit('reset');
      options.logger.warn(
        { err: err?.message },
        'key revocation listener lost its connection; key cache disabled until it is back',
      );
    },
    onReconnected: () => {
      events.emit('reconnected');
      options.logger.info('key revocation listener reconnected; key cache enabled');
    },
  });

  return {
    get healthy() {
      return listener.listening;
    },
    async publish(rev) {
      const id = randomBytes(8).toString('hex');
      // Sent on the listener's sending connection (platform/pg-listener.ts), which works even while
      // our own listening connection is down: the row is revoked, and peers that cannot be told have
      // their caches disabled (see `onLost`), so a miss here cannot leave a revoked key usable.
      const { rows } = await listener.query<{ name: string }>(
        `SELECT DISTINCT application_name AS name FROM pg_stat_activity
         WHERE datname = current_database() AND application_name LIKE $1`,
        [APP_PREFIX + '%'],
      );
      const pending = new Set(rows.map((r) => r.name.slice(APP_PREFIX.length)));
      const expected = pending.size;
      const acked = new Promise<void>((resolve) => {
        if (pending.size === 0) return resolve();
        const timer = setTimeout(resolve, options.ackTimeoutMs);
        waiters.set(id, {
          pending,
          done: () => {
            clearTimeout(timer);
            resolve();
          },
        });
      });
      try {
        await listener.query('SELECT pg_notify($1, $2)', [CHANNEL, JSON.stringify({ id, ...rev })]);
        await acked;
      } finally {
        waiters.delete(id);
      }
      const acknowledged = expected - pending.size;
      if (acknowledged < expected) {
        options.logger.warn(
          { expected, acknowledged },
          'not every API replica confirmed a key revocation in time',
        );
      }
      return { expected, acknowledged };
    },
    onRevoked: (fn) => void events.on('revoked', fn),
    onReset: (fn) => void events.on('reset', fn),
    onReconnected: (fn) => void events.on('reconnected', fn),
    async close() {
      await listener.close();
      events.removeAllListeners();
    },
  };
}
