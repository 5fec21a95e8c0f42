// Waking hibernated endpoints and holding requests until a replica is Ready.
//
// A burst of requests to a sleeping endpoint signals one wake: the wake annotation is written once
// per hibernation (single-flight here, and skipped when the resource already carries a wake newer
// than the hibernation, e.g. from another API replica). Held requests wait on one shared promise
// per endpoint, resolved by the backends watch the moment a Ready address appears.
import { ANNOTATION_LAST_ACTIVITY, ANNOTATION_WAKE_REQUESTED, type DedicatedEndpoint } from '@berth/crds';
import type { Logger } from 'pino';
import type { Backends, Endpoints } from '../ports.ts';

export type WaitOutcome = 'ready' | 'timeout' | 'failed' | 'deleted' | 'aborted';

export interface Waker {
  /** Signals a wake for a hibernated endpoint, at most once per hibernation. */
  wake(endpoint: DedicatedEndpoint): Promise<void>;
  /** Resolves when the endpoint has a Ready address (at once if it has one). */
  waitReady(id: string, timeoutMs: number, signal: AbortSignal): Promise<WaitOutcome>;
  /** When the endpoint's last wait ended with a Ready address (ms since the epoch): its wake's end. */
  readyAt(id: string): number | undefined;
  /** Wake annotations written by this process (for tests and metrics). */
  readonly wakesSignalled: number;
}

export function waker(
  store: Pick<Endpoints, 'watch' | 'annotate' | 'signalWake'>,
  backends: Backends,
  logger: Logger,
  /**
   * Once per wake this process signalled: seconds until the first Ready address it saw, and the
   * wake's signal (the annotation's value, which names the wake in status.lastWake too).
   */
  onWoken?: (id: string, seconds: number, signal: string) => void,
): Waker {
  const inProgress = new Map<string, Promise<void>>();
  const signalledAt = new Map<string, { at: number; signal: string }>();
  const readyAt = new Map<string, number>();
  let wakesSignalled = 0;
  const waits = new Map<
    string,
    { promise: Promise<'ready' | 'failed' | 'deleted'>; cancel(): void; waiters: number }
  >();

  const alreadyRequested = (e: DedicatedEndpoint): boolean => {
    const requested = e.metadata.annotations?.[ANNOTATION_WAKE_REQUESTED];
    if (!requested) return false;
    const hibernatedAt = e.status?.hibernatedAt;
    return !hibernatedAt || Date.parse(requested) >= Date.parse(hibernatedAt);
  };

  const sharedWait = (id: string) => {
    let w = waits.get(id);
    if (w) return w;
    let stopBackends = () => {};
    let stopStore = () => {};
    const promise = new Promise<'ready' | 'failed' | 'deleted'>((resolve) => {
      stopBackends = backends.watch(id, (addresses) => {
        if (!addresses.length) return;
        const now = Date.now();
        readyAt.set(id, now);
        const signalled = signalledAt.get(id);
        if (signalled !== undefined) {
          signalledAt.delete(id);
          onWoken?.(id, (now - signalled.at) / 1000, signalled.signal);
        }
        resolve('ready');
      });
      stopStore = store.watch(id, (e) => {
        if (!e || e.metadata.deletionTimestamp) resolve('deleted');
        else if (e.status?.phase === 'failed') resolve('failed');
      });
    }).finally(() => {
      stopBackends();
      stopStore();
      waits.delete(id);
    });
    w = {
      promise,
      waiters: 0,
      cancel: () => {
        stopBackends();
        stopStore();
        waits.delete(id);
      },
    };
    waits.set(id, w);
    return w;
  };

  return {
    get wakesSignalled() {
      return wakesSignalled;
    },
    readyAt: (id) => readyAt.get(id),
    wake(endpoint) {
      const id = endpoint.metadata.name;
      const key = `${id}@${endpoint.status?.hibernatedAt ?? ''}`;
      if (alreadyRequested(endpoint)) return Promise.resolve();
      let p = inProgress.get(key);
      if (!p) {
        const at = Date.now();
        const signal = new Date(at).toISOString();
        // The operator hears it directly where it can (the pass runs before the write below lands).
        store.signalWake?.(id, signal);
        p = store
          // One write: the wake, and the traffic that asked for it (the call's own activity report
          // waits for the next interval, so the operator is not woken twice for one call).
          .annotate(id, { [ANNOTATION_WAKE_REQUESTED]: signal, [ANNOTATION_LAST_ACTIVITY]: signal })
          .then(() => {
            wakesSignalled++;
            signalledAt.set(id, { at, signal });
            logger.info({ endpoint: id }, 'woke a hibernated endpoint');
          })
          .catch((err: unknown) => {
            inProgress.delete(key); // let the next request try again
            throw err;
          });
        inProgress.set(key, p);
        // Forget it once the endpoint is no longer hibernated by that hibernation.
        setTimeout(() => inProgress.delete(key), 600_000).unref();
      }
      return p;
    },
    async waitReady(id, timeoutMs, signal) {
      if (backends.addresses(id).length) return 'ready';
      if (signal.aborted) return 'aborted';
      const w = sharedWait(id);
      w.waiters++;
      let timer: NodeJS.Timeout | undefined;
      let onAbort = () => {};
      try {
        return await Promise.race([
          w.promise,
          new Promise<WaitOutcome>((resolve) => {
            timer = setTimeout(() => resolve('timeout'), timeoutMs);
            onAbort = () => resolve('aborted');
            signal.addEventListener('abort', onAbort, { once: true });
          }),
        ]);
      } finally {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        if (--w.waiters === 0 && waits.get(id) === w) w.cancel();
      }
    },
  };
}
