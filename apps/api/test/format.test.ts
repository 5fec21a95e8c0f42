import { describe, expect, it } from 'vitest';
import {
  displayPrefix,
  generateKeyValue,
  isWellFormedKey,
  keyHasher,
  KEY_LENGTH,
  sameDigest,
} from '../src/accounts/keys/format.ts';
import { randomBase62 } from '../src/platform/ids.ts';

describe('API key values', () => {
  it('are svc_live_ followed by base62, 42 characters in total', () => {
    for (let i = 0; i < 1000; i++) {
      const v = generateKeyValue();
      expect(v).toHaveLength(42);
      expect(KEY_LENGTH).toBe(42);
      expect(v).toMatch(/^svc_live_[A-Za-z0-9]{33}$/);
      expect(isWellFormedKey(v)).toBe(true);
    }
  });

  it('do not repeat and use the whole alphabet about evenly', () => {
    const seen = new Set<string>();
    const counts = new Map<string, number>();
    for (let i = 0; i < 5000; i++) {
      const v = generateKeyValue();
      seen.add(v);
      for (const c of v.slice(9)) counts.set(c, (counts.get(c) ?? 0) + 1);
    }
    expect(seen.size).toBe(5000);
    expect(counts.size).toBe(62);
    const expected = (5000 * 33) / 62;
    for (const n of counts.values()) expect(Math.abs(n - expected) / expected).toBeLessThan(0.15);
  });

  it('refuses malformed values', () => {
    const good = generateKeyValue();
    for (const bad of [
      '',
      'svc_live_',
      good.slice(0, 41),
      good + 'x',
      good.replace('svc_live_', 'svc_test_'),
      good.slice(0, 41) + '-',
      ` ${good.slice(1)}`,
    ]) {
      expect(isWellFormedKey(bad)).toBe(false);
    }
  });

  it('show only the prefix and four characters after creation', () => {
    const v = generateKeyValue();
    expect(displayPrefix(v)).toBe(v.slice(0, 13));
    expect(displayPrefix(v).startsWith('svc_live_')).toBe(true);
  });

  it('are stored as SHA-256, or HMAC-SHA-256 when a secret is configured', () => {
    const v = 'svc_live_' + 'a'.repeat(33);
    const plain = keyHasher()(v);
    const hmac = keyHasher('s'.repeat(32))(v);
    expect(plain).toMatch(/^[0-9a-f]{64}$/);
    expect(hmac).toMatch(/^[0-9a-f]{64}$/);
    expect(plain).not.toBe(hmac);
    expect(plain).not.toContain(v.slice(9));
    expect(sameDigest(plain, keyHasher()(v))).toBe(true);
    expect(sameDigest(plain, hmac)).toBe(false);
    expect(sameDigest(plain, plain.slice(0, 62))).toBe(false);
  });

  it('randomBase62 gives the length asked for', () => {
    for (const n of [1, 20, 33, 100]) expect(randomBase62(n)).toHaveLength(n);
  });
});
