import { pino, type Logger } from 'pino';

// One structured logger. Authorization headers and key values never reach it: requests are logged
// by the access-log middleware with an explicit field list.
export function createLogger(level: string, name = 'berth-api'): Logger {
  return pino({
    name,
    level,
    redact: { paths: ['*.authorization', '*.value', 'value', 'authorization'], censor: '[redacted]' },
  });
}
export type { Logger };
