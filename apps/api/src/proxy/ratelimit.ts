// Rate limits for Public endpoints (no key to hold anyone to account): a fixed one-minute window
// per endpoint and per client address. In memory by default; shared across API replicas through
// Redis when REDIS_URL is set.
import { Redis } from 'ioredis';

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

export function redisRateLimiter(url: string): RateLimiter {
  const redis = new Redis(url, { maxRetriesPerRequest: 1, enableOfflineQueue: false, lazyConnect: false });
  redis.on('error', () => {}); // surfaced per call below
  return {
    async hit(key, limit) {
      const t = Date.now();
      const start = t - (t % WINDOW_MS);
      const k = `berth:rl:${key}:${start}`;
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
    },
    async close() {
      await redis.quit().catch(() => redis.disconnect());
    },
  };
}
