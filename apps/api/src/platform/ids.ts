// Random identifiers: base62 from the CSPRNG, for ids (`acct_…`, `inv_…`, `chr_…`) and key values.
import { randomBytes } from 'node:crypto';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** Uniform base62 from the CSPRNG (rejection sampling: bytes >= 248 are dropped, no modulo bias). */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const b of randomBytes(length * 2)) {
      if (b < 248) out += ALPHABET[b % 62];
      if (out.length === length) break;
    }
  }
  return out;
}

export function newId(prefix: 'acct' | 'key' | 'inv' | 'chr' | 'chx'): string {
  return `${prefix}_${randomBase62(20)}`;
}
