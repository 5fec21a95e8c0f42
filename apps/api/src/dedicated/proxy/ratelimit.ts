// Rate limits for Public endpoints (no key to hold anyone to account): a fixed one-minute window
// per endpoint and per client address. In memory by default; shared across API replicas through
// Redis when REDIS_URL is set.
import { Redis } from 'ioredis';
import type { Logger } from 'pino';

export interface RateLimitResult {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Milliseconds until the window resets. */
  resetMs: number;
}

export interface RateLimiter {
  hit(key: string, limit: number): Promise<RateLimitResult>;
  close(): Promise<void>;
}

const WINDOW_MS = 60_000;

export function memoryRateLimiter(now = () => Date.now()): RateLimiter {
  const windows = new Map<string, { start: number; count: number }>();
  const sweep = setInterval(() => {
    const t = now();
    for (const [k, w] of windows) if (t - w.start >= WINDOW_MS) windows.delete(k);
  }, WINDOW_MS);
  sweep.unref();
  return {
    async hit(key, limit) {
      const t = now();
      const start = t - (t % WINDOW_MS);
      let w = windows.get(key);
      if (!w || w.start !== start) windows.set(key, (w = { start, count: 0 }));
      w.count++;
      return {
        allowed: w.count <= limit,
        limit,
        remaining: Math.max(0, limit - w.count),
        resetMs: start + WINDOW_MS - t,
      };
    },
    async close() {
      clearInterval(sweep);
    },
  };
}

/**
 * Connects before the API serves (a command sent before the connection is up would fail), then
 * fails fast: if Redis is unreachable later, requests are let through (fail open, logged at most
 * once a minute) rather than refusing every call to a Public endpoint.
 */
export async function redisRateLimiter(url: string, logger?: Logger): Promise<RateLimiter> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1, enableOfflineQueue: false, lazyConnect: true });
  redis.on('error', () => {}); // reported per call below
  await redis.connect();
  let lastWarning = 0;
  return {
    async hit(key, limit) {
      const t = Date.now();
      const start = t - (t % WINDOW_MS);
      const k = `berth:rl:${key}:${start}`;
      try {
        const [[, count]] = (await redis
          .multi()
          .incr(k)
          .pexpire(k, WINDOW_MS + 1000)
          .exec()) as [[null, number], unknown];
        return {
          allowed: count <= limit,
          limit,
          remaining: Math.max(0, limit - count),
          resetMs: start + WINDOW_MS - t,
        };
      } catch (err) {
        if (t - lastWarning > 60_000) {
          lastWarning = t;
          logger?.warn(
            { err: (err as Error).message },
            'rate limiter cannot reach Redis; letting requests through',
          );
        }
        return { allowed: true, limit, remaining: limit, resetMs: start + WINDOW_MS - t };
      }
    },
    async close() {
      await redis.quit().catch(() => redis.disconnect());
    },
  };
}
