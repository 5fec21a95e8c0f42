import type { Informer, KubernetesObject, ObjectCache } from '@kubernetes/client-node';
import type { Logger } from 'pino';

// @kubernetes/client-node informers relist by themselves on 410 Gone but STOP on any other error,
// and start() resolves even when the initial list failed (it only emits 'error'). Supervise: treat
// a start without a resourceVersion as a failed list, and restart with exponential backoff.

type ListWatchLike<T extends KubernetesObject> = Informer<T> &
  ObjectCache<T> & { latestResourceVersion(): string };

export interface Supervised<T extends KubernetesObject> {
  informer: Informer<T> & ObjectCache<T>;
  /** Resolves once the first list has filled the cache (retrying until it does, or until stop). */
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function supervise<T extends KubernetesObject>(
  name: string,
  informer: Informer<T> & ObjectCache<T>,
  log: Logger,
  onError: () => void,
  backoff = { initialMs: 1000, maxMs: 30_000 },
): Supervised<T> {
  const lw = informer as ListWatchLike<T>;
  let stopped = false;
  let synced = false;
  let delay = backoff.initialMs;
  let timer: NodeJS.Timeout | undefined;
  let wake: (() => void) | undefined;
  let lastError = '';
  const sleep = (ms: number) =>
    new Promise<void>((r) => {
      wake = r;
      timer = setTimeout(r, ms);
    });

  const restart = async () => {
    await lw.start().catch(() => {});
    if (lw.latestResourceVersion()) delay = backoff.initialMs;
  };

  informer.on('error', (err) => {
    onError();
    lastError = String(err);
    if (stopped || !synced) return; // before the first sync, start() below retries
    log.warn(
      { informer: name, err: String(err), retryInMs: delay },
      'informer stopped with an error; restarting',
    );
    clearTimeout(timer);
    timer = setTimeout(() => void (stopped || restart()), delay);
    delay = Math.min(backoff.maxMs, delay * 2);
  });

  return {
    informer,
    start: async () => {
      let d = backoff.initialMs;
      while (!stopped) {
        await lw.start().catch(() => {});
        if (lw.latestResourceVersion()) {
          synced = true;
          return;
        }
        log.warn({ informer: name, err: lastError, retryInMs: d }, 'informer initial list failed; retrying');
        await sleep(d);
        d = Math.min(backoff.maxMs, d * 2);
      }
    },
    stop: async () => {
      stopped = true;
      clearTimeout(timer);
      wake?.();
      await informer.stop();
    },
  };
}
