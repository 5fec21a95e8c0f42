import { describe, expect, it } from 'vitest';
import {
  callCost,
  ceilDiv,
  formatAmount,
  formatHours,
  gpuTimeAmount,
  parseAmount,
  parsePricing,
  parseSignedAmount,
  positiveAmount,
  reservationBound,
  roundHalfUp,
  signedAmount,
} from '../src/platform/money.ts';
import { leaseGrant, leaseWant } from '../src/billing/lease-policy.ts';

describe('parseAmount: decimal strings to micro-units', () => {
  it.each([
    ['10.00', 10_000_000n],
    ['10', 10_000_000n],
    ['0.000001', 1n],
    ['9.99876', 9_998_760n],
    ['0', 0n],
    ['000.5', 500_000n],
    ['999999999999.999999', 999_999_999_999_999_999n],
  ])('%s → %s', (text, units) => {
    expect(parseAmount(text)).toBe(units);
  });

  it.each([
    ['0.0000001'], // finer than a micro-unit: refused, not rounded
    ['1e3'],
    ['-1'],
    ['+1'],
    [' 1'],
    ['1.'],
    ['.5'],
    ['1,000'],
    ['1_000'],
    ['NaN'],
    [''],
    ['1000000000000'], // 13 integer digits
  ])('refuses %j', (text) => {
    expect(parseAmount(text)).toBeUndefined();
  });

  it('signed amounts take a leading minus', () => {
    expect(parseSignedAmount('-1.5')).toBe(-1_500_000n);
    expect(parseSignedAmount('2')).toBe(2_000_000n);
    expect(parseSignedAmount('--1')).toBeUndefined();
  });
});

describe('formatAmount: six decimals, always', () => {
  it.each([
    [9_998_760n, '9.998760'],
    [0n, '0.000000'],
    [1n, '0.000001'],
    [10_000_000n, '10.000000'],
    [-120n, '-0.000120'],
    [-12_345_678n, '-12.345678'],
  ])('%s → %s', (units, text) => {
    expect(formatAmount(units)).toBe(text);
  });

  it('round-trips every formatted amount', () => {
    for (const v of [0n, 1n, 999_999n, 1_000_000n, 123_456_789_012n]) {
      expect(parseAmount(formatAmount(v))).toBe(v);
    }
  });
});

describe('rounding', () => {
  it.each([
    [0n, 3n, 0n, 0n],
    [1n, 3n, 1n, 0n],
    [3n, 2n, 2n, 2n], // 1.5: up both ways
    [5n, 2n, 3n, 3n], // 2.5
    [7n, 3n, 3n, 2n], // 2.33
    [8n, 3n, 3n, 3n], // 2.67
    [6n, 3n, 2n, 2n],
  ])('%s / %s: ceil %s, half up %s', (n, d, ceil, halfUp) => {
    expect(ceilDiv(n, d)).toBe(ceil);
    expect(roundHalfUp(n, d)).toBe(halfUp);
  });
});

describe('callCost: (pricing, prompt tokens, completion tokens) → micro-units, rounded up once', () => {
  const p = parsePricing({ inputPerMTok: '0.10', outputPerMTok: '0.30' })!;
  it.each([
    // prompt, completion, cost (µ$): 0.1 µ$ per input token, 0.3 µ$ per output token
    [0, 0, 0n],
    [10, 0, 1n], // exactly 1
    [1, 0, 1n], // 0.1 → 1 (up)
    [11, 0, 2n], // 1.1 → 2
    [1000, 100, 130n], // 100 + 30
    [1_000_000, 0, 100_000n], // one million input tokens = the price, $0.10
    [0, 1_000_000, 300_000n],
    [123, 45, 26n], // 12.3 + 13.5 = 25.8 → 26
  ])('%i prompt + %i completion → %s', (prompt, completion, cost) => {
    expect(callCost(p, prompt, completion)).toBe(cost);
  });

  it('sums exactly before rounding (no per-part rounding)', () => {
    // 5 × 0.1 + 5 × 0.3 = 2.0 exactly; rounding each part first would give 1 + 2 = 3.
    expect(callCost(p, 5, 5)).toBe(2n);
  });

  it('is exact for large counts (no float drift)', () => {
    const exp = parsePricing({ inputPerMTok: '15.000001', outputPerMTok: '75.123456' })!;
    // 7,000,003 × 15.000001 + 3 × 75.123456 = 105,000,052.000003 + 225.370368 → 105,000,277.370371 → up
    expect(callCost(exp, 7_000_003, 3)).toBe(105_000_278n);
  });

  it('refuses prices that are not decimals', () => {
    expect(parsePricing({ inputPerMTok: '0.1', outputPerMTok: 'free' })).toBeUndefined();
    expect(parsePricing({ inputPerMTok: '-1', outputPerMTok: '1' })).toBeUndefined();
  });
});

describe('reservationBound: an upper bound of the call', () => {
  const p = parsePricing({ inputPerMTok: '1', outputPerMTok: '2' })!; // 1 µ$ / input token, 2 / output
  it('bytes + template allowance at the input price, max_tokens at the output price', () => {
    expect(reservationBound({ pricing: p, requestBytes: 1000, maxTokens: 100 })).toBe(1000n + 256n + 200n);
  });
  it('falls back to the context length, then to 4096 completion tokens', () => {
    expect(reservationBound({ pricing: p, requestBytes: 0, contextLength: 8192 })).toBe(256n + 16_384n);
    expect(reservationBound({ pricing: p, requestBytes: 0 })).toBe(256n + 8192n);
  });
  it('is never below the settled cost of a call within its limits', () => {
    for (const [bytes, max, prompt, completion] of [
      [40, 16, 12, 16],
      [4000, 1, 1100, 1],
      [10, 500, 10 + 200, 480],
    ] as const) {
      expect(reservationBound({ pricing: p, requestBytes: bytes, maxTokens: max })).toBeGreaterThanOrEqual(
        callCost(p, prompt, completion),
      );
    }
  });
});

describe('GPU time', () => {
  it.each([
    // GPU-ms, rate per GPU-hour (µ$), amount
    [3_600_000n, 2_500_000n, 2_500_000n], // 1 GPU-hour at $2.50
    [9_000_000n, 1_000_000n, 2_500_000n], // 2.5 h at $1
    [1n, 3_600_000n, 1n], // 1 ms at $3.60/h = 1 µ$
    [1n, 1_800_000n, 1n], // 0.5 µ$ → half up → 1
    [1n, 1_799_999n, 0n], // 0.4999… → 0
    [0n, 2_500_000n, 0n],
  ])('%s GPU-ms at %s/h → %s', (ms, rate, amount) => {
    expect(gpuTimeAmount(ms, rate)).toBe(amount);
  });
  it('hours with six decimals', () => {
    expect(formatHours(9_000_000n)).toBe('2.500000');
    expect(formatHours(1n)).toBe('0.000000');
    expect(formatHours(1_800n)).toBe('0.000500');
  });
});

describe('request body amounts', () => {
  it('positiveAmount refuses zero, negatives, numbers and floats', () => {
    expect(positiveAmount.parse('10.00')).toBe(10_000_000n);
    for (const bad of ['0', '0.000000', '-1', 10, '1.0000001', null]) {
      const r = positiveAmount.safeParse(bad);
      expect(r.success).toBe(false);
      expect(r.error?.issues[0]?.message).toBe(
        'must be a positive decimal string with at most 6 decimals, e.g. "10.00"',
      );
    }
  });
  it('signedAmount takes a sign and refuses zero', () => {
    expect(signedAmount.parse('-0.5')).toBe(-500_000n);
    expect(signedAmount.safeParse('-0').success).toBe(false);
  });
});

describe('lease sizing', () => {
  it.each([
    // available, need, want → grant
    [1000n, 10n, 160n, 160n], // plenty: what it wants
    [100n, 10n, 160n, 55n], // need + half of the remaining 90
    [10n, 10n, 160n, 10n], // exactly the need, nothing more
    [9n, 10n, 160n, 0n], // does not fit: nothing
    [0n, 0n, 100n, 0n], // top-up of an empty account
    [100n, 0n, 100n, 50n], // a top-up takes at most half
    [100n, 0n, 0n, 0n], // wants nothing
    [-5n, 1n, 10n, 0n],
  ])('available %s, need %s, want %s → %s', (available, need, want, grant) => {
    expect(leaseGrant(available, need, want)).toBe(grant);
  });

  it('two replicas on a small balance both find room without asking each other', () => {
    let available = 100n;
    const a = leaseGrant(available, 10n, 1000n);
    available -= a;
    const b = leaseGrant(available, 10n, 1000n);
    expect(a).toBe(55n);
    expect(b).toBe(27n); // 10 + half of the 35 left
    expect(a + b).toBeLessThanOrEqual(100n);
  });

  it('wants enough for ten seconds at the recent rate, and at least 16 calls', () => {
    expect(leaseWant({ callSize: 10n, ratePerSecond: 0n, horizonMs: 10_000, minCalls: 16n })).toBe(160n);
    expect(leaseWant({ callSize: 10n, ratePerSecond: 100n, horizonMs: 10_000, minCalls: 16n })).toBe(1000n);
  });
});
