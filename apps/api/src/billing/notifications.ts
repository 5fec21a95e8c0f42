// Billing events between API replicas, over PostgreSQL NOTIFY on `berth_billing` (sent inside the
// transaction that causes them, so they are delivered exactly when it commits):
// - `available`: an account's free balance grew (a credit, a lease given back or taken back from a
//   replica that died), or a replica answers a `reclaim` (`g: false` when it had nothing to give).
//   Replicas that answered 402 for the account try again instead of trusting that answer.
// - `reclaim`: a replica is short for an account: every replica holding a slice of it gives back
//   what it is not using, then answers `available`.
// On the embedded database the same NOTIFY is delivered in process by PGlite.
import { EventEmitter } from 'node:events';
import type { PGlite } from '@electric-sql/pglite';
import type { Logger } from 'pino';
import { pgListener } from '../platform/pg-listener.ts';

/** The NOTIFY channel of the billing events below. */
export const BILLING_CHANNEL = 'berth_billing';

export interface BillingMessage {
  t: 'available' | 'reclaim';
  /** The account. */
  a: string;
  /** The replica that sent it (null for a credit). */
  r: string | null;
  /** `available` only: the free balance grew (false: a reclaim answer with nothing to give back). */
  g: boolean;
}

export interface BillingEvents {
  onMessage(fn: (m: BillingMessage) => void): void;
  /** Messages may have been missed (the connection dropped): forget what they would have changed. */
  onReset(fn: () => void): void;
  close(): Promise<void>;
}

function decode(payload: string | undefined, logger: Logger): BillingMessage | undefined {
  if (!payload) return undefined;
  try {
    const m = JSON.parse(payload) as Partial<BillingMessage>;
    if ((m.t === 'available' || m.t === 'reclaim') && typeof m.a === 'string')
      return { t: m.t, a: m.a, r: typeof m.r === 'string' ? m.r : null, g: m.g !== false };
  } catch {
    // fall through
  }
  logger.warn({ channel: BILLING_CHANNEL }, 'ignored a malformed billing notification');
  return undefined;
}

/** One LISTEN connection per process (see pg-listener.ts); a drop is reported as a reset. */
export async function postgresBillingEvents(options: {
  url: string;
  logger: Logger;
}): Promise<BillingEvents> {
  const events = new EventEmitter();
  const listener = await pgListener({
    url: options.url,
    applicationName: 'berth-billing',
    channels: [BILLING_CHANNEL],
    onNotification(n) {
      const m = decode(n.payload, options.logger);
      if (m) events.emit('message', m);
    },
    onLost() {
      events.emit('reset');
      options.logger.warn('billing notification listener lost its connection; reconnecting');
    },
    // Announcements may have been missed while it was down.
    onReconnected: () => events.emit('reset'),
  });
  return {
    onMessage: (fn) => void events.on('message', fn),
    onReset: (fn) => void events.on('reset', fn),
    async close() {
      events.removeAllListeners();
      await listener.close();
    },
  };
}

/** The embedded database: PGlite delivers NOTIFY to its own listeners, in this process. */
export async function pgliteBillingEvents(pglite: PGlite, logger: Logger): Promise<BillingEvents> {
  const events = new EventEmitter();
  const unlisten = await pglite.listen(BILLING_CHANNEL, (payload) => {
    const m = decode(payload, logger);
    if (m) events.emit('message', m);
  });
  return {
    onMessage: (fn) => void events.on('message', fn),
    onReset: (fn) => void events.on('reset', fn),
    async close() {
      events.removeAllListeners();
      await unlisten();
    },
  };
}
