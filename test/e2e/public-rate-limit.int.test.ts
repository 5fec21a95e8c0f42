// A Public endpoint's rate limits hold across two API replicas sharing Redis: one burst split between
// the replicas admits the endpoint's limit once, not once per replica (the chaos suite
// `public-rate-limit` runs whole minutes of it).
import { expect, it } from 'vitest';
import { limitsHeld, publicLimitAcrossReplicas, type RateLimitRun } from '../support/public-rate-limit.ts';

it('two replicas on one Redis admit one limit between them', async () => {
  const run: RateLimitRun = {
    windows: 0,
    perEndpoint: 20,
    perClient: 5,
    crowd: 6,
    pauseMs: 20,
    burstCalls: 10,
  };
  const [w] = await publicLimitAcrossReplicas(run);
  expect(w!.other).toEqual([]);
  expect(w!.sent).toBe(3 * 5 + 6 * 10);
  expect(w!.admitted).toBe(20);
  expect(w!.heavyAdmitted).toBe(5);
  expect(w!.crowdMaxAdmitted).toBeLessThanOrEqual(5);
  expect(w!.refused).toBe(w!.sent - 20);
  expect(limitsHeld(run, [w!])).toBe(true);
}, 300_000);
