// Held is not spent (issue 32): a reservation short only because calls in flight hold the money
// waits for them to settle (BILLING_SETTLE_WAIT_MS) instead of answering 402, on one replica and
// across two; an account that cannot pay is refused at once; a refusal says what is held.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { refusalError } from '../src/billing/refusal.ts';
import type { Wallet } from '../src/billing/wallet.ts';
import { errorBody } from '../src/platform/errors.ts';
import { balanceOf, billingBed, type BillingBed } from '@berth/test/support/billing-replica';

let bed: BillingBed;
beforeAll(async () => {
  bed = await billingBed('held');
});
afterAll(async () => bed?.close());

const usage = { keyId: 'key_test', model: 'm', promptTokens: 1, completionTokens: 1 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A call: reserve `bound`, run `ms`, settle `cost`; what it got. */
async function call(w: Wallet, accountId: string, bound: bigint, cost: bigint, ms: number) {
  const started = performance.now();
  const r = await w.reserve({ accountId, amount: bound });
  const waited = performance.now() - started;
  if (!r.ok) return { ok: false as const, refusal: r, waited };
  await sleep(ms);
  r.hold.settle(cost, usage);
  return { ok: true as const, waited };
}

describe('calls in flight hold, they have not spent', () => {
  // The figures: a balance of 0.0015, calls reserving 0.0004 and costing 0.00004. Before,
  // 27 of 30 concurrent calls got 402. Every call needs 0.0004 free to start, so the balance pays for
  // 28 of them (1,500 − 27 × 40 = 420 ≥ 400; 1,500 − 28 × 40 = 380 < 400): 28 are answered, and the
  // last two are refused only once nothing is in flight and 380 is left.
  it('30 concurrent calls on a balance of 0.0015, reserving 0.0004 and costing 0.00004: 28 answered, 2 truly refused', async () => {
    const id = await bed.account(1_500n);
    const w = await bed.replica();
    const results = await Promise.all(Array.from({ length: 30 }, () => call(w, id, 400n, 40n, 30)));
    expect(results.filter((r) => r.ok).length).toBe(28);
    for (const r of results)
      if (!r.ok) expect(r.refusal).toMatchObject({ reason: 'balance', available: 380n, held: 0n });
    await w.flush();
    expect(await balanceOf(bed.url, id)).toMatchObject({ balance: 380n, ledger: 380n });
  });

  it('the same calls across two replicas: 28 answered, the ledger exact', async () => {
    const id = await bed.account(1_500n);
    const [a, b] = [await bed.replica(), await bed.replica()];
    const results = await Promise.all(
      Array.from({ length: 30 }, (_, i) => call(i % 2 ? b : a, id, 400n, 40n, 30)),
    );
    expect(results.filter((r) => r.ok).length).toBe(28);
    await a.close();
    await b.close();
    expect(await balanceOf(bed.url, id)).toEqual({ balance: 380n, leased: 0n, ledger: 380n });
  });

  it('calls keep coming until the balance is truly spent: exactly as many as it pays for', async () => {
    // 1,500 pays 37 calls of 40 while a reservation of 400 still fits: 1,500 − 27 × 40 = 420 ≥ 400,
    // 1,500 − 28 × 40 = 380 < 400. So 28 are answered, and the 29th is refused at once (cannot pay).
    const id = await bed.account(1_500n);
    const w = await bed.replica();
    let answered = 0;
    await Promise.all(
      Array.from({ length: 10 }, async () => {
        for (;;) {
          const r = await call(w, id, 400n, 40n, 5);
          if (!r.ok) return;
          answered++;
        }
      }),
    );
    expect(answered).toBe(28);
    await w.close();
    expect(await balanceOf(bed.url, id)).toEqual({ balance: 380n, leased: 0n, ledger: 380n });
  });
});

describe('402, when it is the answer', () => {
  it('an account that cannot pay even with nothing in flight: at once, saying so', async () => {
    const id = await bed.account(300n);
    const w = await bed.replica({ settleWaitMs: 5_000 });
    const r = await call(w, id, 400n, 40n, 0);
    expect(r.ok).toBe(false);
    expect(r.waited).toBeLessThan(500);
    if (r.ok) return;
    expect(r.refusal).toMatchObject({ reason: 'balance', needed: 400n, available: 300n, held: 0n });
    // From memory after that: no write per refused call.
    const before = w.syncs;
    for (let i = 0; i < 20; i++) expect((await w.reserve({ accountId: id, amount: 400n })).ok).toBe(false);
    expect(w.syncs).toBe(before);
  });

  it('held by a call that does not settle in time: 402 after the wait, naming what it holds', async () => {
    const id = await bed.account(500n);
    const w = await bed.replica({ settleWaitMs: 300 });
    const long = await w.reserve({ accountId: id, amount: 400n });
    expect(long.ok).toBe(true);
    const r = await call(w, id, 400n, 40n, 0);
    expect(r.ok).toBe(false);
    expect(r.waited).toBeGreaterThanOrEqual(290);
    expect(r.waited).toBeLessThan(2_000);
    if (r.ok || !long.ok) return;
    expect(r.refusal).toMatchObject({ reason: 'balance', needed: 400n, held: 400n, available: 100n });
    expect(errorBody(refusalError(r.refusal, 'USD'), 'openai')).toEqual({
      error: {
        message: 'Insufficient balance / payment required',
        type: 'insufficient_quota',
        code: 'insufficient_balance',
        param: null,
        balance: {
          available: '0.000100',
          held_in_flight: '0.000400',
          needed: '0.000400',
          waited_ms: expect.any(Number),
          currency: 'USD',
        },
      },
      message: 'Insufficient balance / payment required',
    });
    long.hold.settle(40n, usage);
  });

  it('a call that waited is answered as soon as the call holding its money settles', async () => {
    const id = await bed.account(500n);
    const w = await bed.replica({ settleWaitMs: 5_000 });
    const first = await w.reserve({ accountId: id, amount: 400n });
    if (!first.ok) throw new Error('refused');
    const second = call(w, id, 400n, 40n, 0);
    await sleep(100);
    first.hold.settle(40n, usage);
    const r = await second;
    expect(r.ok).toBe(true);
    expect(r.waited).toBeGreaterThanOrEqual(90);
    expect(r.waited).toBeLessThan(1_000);
  });

  it('across replicas: the other replica gives back what its calls free as they settle', async () => {
    const id = await bed.account(1_000n);
    const [a, b] = [await bed.replica({ settleWaitMs: 5_000 }), await bed.replica({ settleWaitMs: 5_000 })];
    const held = [
      await a.reserve({ accountId: id, amount: 400n }),
      await a.reserve({ accountId: id, amount: 400n }),
    ];
    // b finds 200 at most: it waits, and a's calls settling give it what it needs.
    const waiting = call(b, id, 400n, 40n, 0);
    await sleep(300);
    for (const h of held) if (h.ok) h.hold.settle(40n, usage);
    const r = await waiting;
    expect(r.ok).toBe(true);
    expect(r.waited).toBeLessThan(3_000);
    await a.close();
    await b.close();
    expect(await balanceOf(bed.url, id)).toEqual({ balance: 880n, leased: 0n, ledger: 880n });
  });

  it('BILLING_SETTLE_WAIT_MS=0: refused at once, held named', async () => {
    const id = await bed.account(500n);
    const w = await bed.replica({ settleWaitMs: 0 });
    const long = await w.reserve({ accountId: id, amount: 400n });
    const r = await call(w, id, 400n, 40n, 0);
    expect(r.ok).toBe(false);
    expect(r.waited).toBeLessThan(500);
    if (!r.ok) expect(r.refusal).toMatchObject({ held: 400n });
    if (long.ok) long.hold.release();
  });
});
