// Public-endpoint rate limits: the in-memory limiter, and the Redis one that API replicas share
// (REDIS_URL; TEST_REDIS_URL or the local server on 127.0.0.1:6379 here).
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { memoryRateLimiter, redisRateLimiter, type RateLimiter } from '../src/dedicated/proxy/ratelimit.ts';

const REDIS = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const opened: RateLimiter[] = [];
afterAll(async () => {
  await Promise.all(opened.map((l) => l.close()));
});

async function hits(limiter: RateLimiter, key: string, n: number, limit: number) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(await limiter.hit(key, limit));
  return out;
}

describe('in-memory limiter', () => {
  it('allows the limit per window, then refuses with the time to the next window', async () => {
    let now = 120_000 + 10_000; // 10 s into a minute
    const limiter = memoryRateLimiter(() => now);
    opened.push(limiter);
    const r = await hits(limiter, 'k', 4, 3);
    expect(r.map((x) => x.allowed)).toEqual([true, true, true, false]);
    expect(r.map((x) => x.remaining)).toEqual([2, 1, 0, 0]);
    expect(r[3]!.resetMs).toBe(50_000);
    expect((await limiter.hit('other', 3)).allowed).toBe(true);
    now += 50_000; // the next minute
    expect((await limiter.hit('k', 3)).allowed).toBe(true);
  });
});

describe('Redis limiter', () => {
  it('is shared by API replicas: two limiters count together', async () => {
    const a = await redisRateLimiter(REDIS);
    const b = await redisRateLimiter(REDIS);
    opened.push(a, b);
    const key = `test-${randomBytes(6).toString('hex')}`;
    const seen = [];
    for (let i = 0; i < 6; i++) seen.push(await (i % 2 ? b : a).hit(key, 4));
    expect(seen.map((x) => x.allowed)).toEqual([true, true, true, true, false, false]);
    expect(seen.map((x) => x.remaining)).toEqual([3, 2, 1, 0, 0, 0]);
    expect(seen[5]!.resetMs).toBeGreaterThan(0);
    expect(seen[5]!.resetMs).toBeLessThanOrEqual(60_000);
  });

  it('lets requests through when Redis becomes unreachable, instead of failing them', async () => {
    const limiter = await redisRateLimiter(REDIS);
    await limiter.close();
    const r = await limiter.hit('after-close', 1);
    expect(r).toMatchObject({ allowed: true, limit: 1 });
  });
});
