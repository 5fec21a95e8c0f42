import { pino, type Logger } from 'pino';

// One structured logger. Authorization headers and key values never reach it: requests are logged
// by the access-log middleware with an explicit field list.
//
// Lines go to stdout through an asynchronous destination that writes in 8 KiB batches and at least
// every 250 ms: the access log is on every request's path, and a write per line cost more CPU than
// the rest of a proxied request's overhead (BENCHMARKS.md, Proxy). A line waits at most 250 ms.
// Pino flushes at exit; the server flushes on shutdown.
export function createLogger(level: string, name = 'berth-api'): Logger {
  return pino(
    {
      name,
      level,
      // Exact paths (no wildcards, which cost a walk of every line's keys): the fields where a
      // credential could appear if someone logged a request or a created key by mistake.
      redact: {
        paths: ['authorization', 'value', 'headers.authorization', 'key.value'],
        censor: '[redacted]',
      },
    },
    pino.destination({ dest: 1, sync: false, minLength: 8192, periodicFlush: 250 }),
  );
}
export type { Logger };
