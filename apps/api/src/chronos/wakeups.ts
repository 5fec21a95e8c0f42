// The NOTIFY that tells every replica executions were queued (sent in the transaction that queued
// them, ./queue-repository.ts CHANNEL), so that all replicas start claiming at once rather than at
// their next 5 s look. One LISTEN connection per process (platform/pg-listener.ts); on the embedded
// database, PGlite delivers it to its own listeners in this process.
import type { PGlite } from '@electric-sql/pglite';
import type { Logger } from 'pino';
import { pgListener } from '../platform/pg-listener.ts';
import { CHANNEL } from './queue-repository.ts';

export type WakeupSource = { url: string } | { pglite: PGlite };

export interface Wakeups {
  close(): Promise<void>;
}

export async function listenForWakeups(
  source: WakeupSource,
  wake: () => void,
  logger: Logger,
): Promise<Wakeups> {
  if ('pglite' in source) {
    const unlisten = await source.pglite.listen(CHANNEL, wake);
    return { close: () => unlisten() };
  }
  const listener = await pgListener({
    url: source.url,
    applicationName: 'berth-chronos',
    channels: [CHANNEL],
    onNotification: () => wake(),
    onLost: () => logger.warn('chronos: its notification listener lost its connection; reconnecting'),
    // Executions queued while it was down: the 5 s look would find them, this finds them now.
    onReconnected: wake,
  });
  return { close: () => listener.close() };
}
