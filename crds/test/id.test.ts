import { describe, expect, it } from 'vitest';
import { isEndpointId, newEndpointId } from '../src/index.ts';

describe('newEndpointId', () => {
  it('is endpt- plus 14 base32 characters, DNS-1123 safe and unique', () => {
    const ids = new Set(Array.from({ length: 1000 }, () => newEndpointId()));
    expect(ids.size).toBe(1000);
    for (const id of ids) {
      expect(id).toMatch(/^endpt-[a-z2-7]{14}$/);
      expect(isEndpointId(id)).toBe(true);
    }
  });
  it('rejects ids without the prefix or with bad characters', () => {
    expect(isEndpointId('foo')).toBe(false);
    expect(isEndpointId('endpt-UPPER')).toBe(false);
    expect(isEndpointId('endpt-' + 'a'.repeat(60))).toBe(false);
  });
});
