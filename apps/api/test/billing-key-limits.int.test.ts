// Per-key spend limits (issue 32) in the wallet, on real PostgreSQL: a key's allowance per period is
// reserved like a balance (slices lent to replicas, charges counted with the account's batch), a key
// at its limit is refused with its own reason while the account's balance is untouched, keys of one
// rotation line share one allowance, and two replicas together never pass the limit.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { refusalError } from '../src/billing/refusal.ts';
import type { Wallet } from '../src/billing/wallet.ts';
import { errorBody } from '../src/platform/errors.ts';
import { balanceOf, billingBed, limitedKey, type BillingBed } from '@berth/test/support/billing-replica';
import { sql } from '@berth/test/support/postgres';

let bed: BillingBed;
beforeAll(async () => {
  bed = await billingBed('key_limits');
});
afterAll(async () => bed?.close());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Reserve and settle `cost` (the bound) with `keyId` until refused; how many were answered. */
async function spendUntilRefused(w: Wallet, accountId: string, keyId: string, cost: bigint): Promise<number> {
  let n = 0;
  for (;;) {
    const r = await w.reserve({ accountId, amount: cost, keyId });
    if (!r.ok) return n;
    await sleep(1);
    r.hold.settle(cost, { keyId, model: 'm', promptTokens: 1, completionTokens: 1 });
    n++;
  }
}

async function spent(lineage: string): Promise<bigint> {
  const [row] = await sql<{ s: string }>(
    bed.url,
    'SELECT COALESCE(SUM(spent), 0)::text AS s FROM key_spend WHERE lineage = $1',
    [lineage],
  );
  return BigInt(row!.s);
}

describe('a key with a spend limit', () => {
  it('is refused at its limit with its own reason; the account and its other keys are untouched', async () => {
    const id = await bed.account(1_000_000n);
    const key = await limitedKey(bed.url, id, { amount: 1_000n, period: 'day' });
    const free = await limitedKey(bed.url, id, null);
    const w = await bed.replica({ settleWaitMs: 200 });
    expect(await spendUntilRefused(w, id, key, 400n)).toBe(2);
    const r = await w.reserve({ accountId: id, amount: 400n, keyId: key });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    const midnight = new Date();
    midnight.setUTCHours(24, 0, 0, 0);
    expect(r).toMatchObject({ reason: 'spend_limit', keyId: key, limit: 1_000n, spent: 800n, held: 0n });
    if (r.reason === 'spend_limit') expect(r.resetsAt.toISOString()).toBe(midnight.toISOString());
    // At once: it cannot fit even with nothing in flight (no wait).
    expect(r.waitedMs).toBeLessThan(150);
    const body = errorBody(refusalError(r, 'USD'), 'openai') as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({
      type: 'insufficient_quota',
      code: 'spend_limit_reached',
      message: `This API key has reached its spend limit (0.001000 USD per day; 0.000800 spent, 0.000000 held by calls in flight); it resets at ${midnight.toISOString()}. Raise or remove the limit in Settings → Keys`,
      spend_limit: {
        key,
        amount: '0.001000',
        period: 'day',
        spent: '0.000800',
        held_in_flight: '0.000000',
        needed: '0.000400',
        resets_at: midnight.toISOString(),
        currency: 'USD',
      },
    });
    // Another key of the account spends on.
    expect(await spendUntilRefused(w, id, free, 400_000n)).toBe(2);
    await w.close();
    expect(await balanceOf(bed.url, id)).toEqual({ balance: 200_000n - 800n, leased: 0n, ledger: 199_200n });
    expect(await spent(key)).toBe(800n);
    expect(await sql(bed.url, 'SELECT amount::text FROM key_leases WHERE lineage = $1', [key])).toEqual([
      { amount: '0' },
    ]);
  });

  it('two replicas together never pass it: exactly limit / cost calls answered', async () => {
    const id = await bed.account(1_000_000n);
    const key = await limitedKey(bed.url, id, { amount: 10_000n, period: 'month' });
    const [a, b] = [await bed.replica(), await bed.replica()];
    const counts = await Promise.all(
      Array.from({ length: 40 }, (_, i) => spendUntilRefused(i % 2 ? b : a, id, key, 100n)),
    );
    expect(counts.reduce((x, y) => x + y, 0)).toBe(100);
    expect(counts.filter((_, i) => i % 2).reduce((x, y) => x + y, 0)).toBeGreaterThan(0);
    expect(counts.filter((_, i) => !(i % 2)).reduce((x, y) => x + y, 0)).toBeGreaterThan(0);
    await a.close();
    await b.close();
    expect(await spent(key)).toBe(10_000n);
    expect(await balanceOf(bed.url, id)).toEqual({ balance: 990_000n, leased: 0n, ledger: 990_000n });
  });

  it('keys of one rotation line share it', async () => {
    const id = await bed.account(1_000_000n);
    const old = await limitedKey(bed.url, id, { amount: 1_000n, period: 'week' });
    const next = await limitedKey(bed.url, id, { amount: 1_000n, period: 'week' }, old);
    const w = await bed.replica({ settleWaitMs: 0 });
    expect(await spendUntilRefused(w, id, old, 300n)).toBe(3);
    expect(await spendUntilRefused(w, id, next, 100n)).toBe(1);
    await w.close();
    expect(await spent(old)).toBe(1_000n);
  });

  it('a limit changed on another replica applies at the next call (keyChanged)', async () => {
    const id = await bed.account(1_000_000n);
    const key = await limitedKey(bed.url, id, { amount: 500n, period: 'day' });
    const w = await bed.replica({ settleWaitMs: 0 });
    expect(await spendUntilRefused(w, id, key, 100n)).toBe(5);
    await sql(bed.url, `UPDATE api_keys SET spend_limit = 800 WHERE id = $1`, [key]);
    w.keyChanged(key);
    expect(await spendUntilRefused(w, id, key, 100n)).toBe(3);
    await sql(bed.url, `UPDATE api_keys SET spend_limit = NULL, spend_period = NULL WHERE id = $1`, [key]);
    w.keyChanged(); // a change that may have been missed: every key is read again
    expect(await spendUntilRefused(w, id, key, 300_000n)).toBe(3); // the balance is the limit now
    await w.close();
  });

  it('held by a call of the same key: the next call waits for it to settle', async () => {
    const id = await bed.account(1_000_000n);
    const key = await limitedKey(bed.url, id, { amount: 1_000n, period: 'day' });
    const w = await bed.replica({ settleWaitMs: 5_000 });
    const first = await w.reserve({ accountId: id, amount: 800n, keyId: key });
    if (!first.ok) throw new Error('refused');
    const started = performance.now();
    const second = w.reserve({ accountId: id, amount: 400n, keyId: key });
    await sleep(150);
    first.hold.settle(100n, { keyId: key, model: 'm', promptTokens: 1, completionTokens: 1 });
    const r = await second;
    expect(r.ok).toBe(true);
    expect(performance.now() - started).toBeGreaterThanOrEqual(140);
    if (r.ok) r.hold.release();
    await w.close();
  });
});

describe('spend periods (one SQL definition)', () => {
  it('a UTC day, an ISO week from Monday, a calendar month', async () => {
    const rows = await sql<{ p: string; start: Date; end: Date }>(
      bed.url,
      `SELECT p, berth_period_start(p::"SpendPeriod", '2026-03-04 23:30:00-05') AS start,
              berth_period_end(p::"SpendPeriod", '2026-03-04 23:30:00-05') AS end
       FROM unnest(ARRAY['day', 'week', 'month']) AS p`,
    );
    expect(rows.map((r) => [r.p, r.start.toISOString(), r.end.toISOString()])).toEqual([
      ['day', '2026-03-05T00:00:00.000Z', '2026-03-06T00:00:00.000Z'],
      ['week', '2026-03-02T00:00:00.000Z', '2026-03-09T00:00:00.000Z'],
      ['month', '2026-03-01T00:00:00.000Z', '2026-04-01T00:00:00.000Z'],
    ]);
  });
});
