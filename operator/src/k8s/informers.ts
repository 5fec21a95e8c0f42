import type { Informer, KubernetesObject, ObjectCache } from '@kubernetes/client-node';
import type { Logger } from 'pino';

// @kubernetes/client-node informers relist by themselves on 410 Gone but STOP on any other error.
// Supervise: restart with exponential backoff, reset after a successful (re)connect.

export interface Supervised<T extends KubernetesObject> {
  informer: Informer<T> & ObjectCache<T>;
  /** Resolves once the first list has filled the cache. */
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
  let stopped = false;
  let delay = backoff.initialMs;
  let timer: NodeJS.Timeout | undefined;
  informer.on('connect', () => {
    delay = backoff.initialMs;
  });
  informer.on('error', (err) => {
    if (stopped) return;
    onError();
    log.warn(
      { informer: name, err: String(err), retryInMs: delay },
      'informer stopped with an error; restarting',
    );
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (stopped) return;
      informer
        .start()
        .catch((e: unknown) => log.warn({ informer: name, err: String(e) }, 'informer restart failed'));
    }, delay);
    delay = Math.min(backoff.maxMs, delay * 2);
  });
  return {
    informer,
    start: async () => {
      // The first list must succeed before we reconcile from the cache; retry it with backoff too.
      let d = backoff.initialMs;
      for (;;) {
        try {
          await informer.start();
          return;
        } catch (err) {
          if (stopped) return;
          onError();
          log.warn(
            { informer: name, err: String(err), retryInMs: d },
            'informer initial list failed; retrying',
          );
          await new Promise((r) => setTimeout(r, d));
          d = Math.min(backoff.maxMs, d * 2);
        }
      }
    },
    stop: async () => {
      stopped = true;
      clearTimeout(timer);
      await informer.stop();
    },
  };
}
