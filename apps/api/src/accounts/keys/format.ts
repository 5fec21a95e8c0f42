// API key values: `svc_live_` + 33 base62 characters from the CSPRNG = 42 characters (spec §2),
// about 196 bits of randomness. Only a hash is stored; listings show the prefix.
import { createHmac, hash, timingSafeEqual } from 'node:crypto';
import { randomBase62 } from '../../platform/ids.ts';

export const KEY_PREFIX = 'svc_live_';
export const KEY_LENGTH = 42;
const RANDOM_LENGTH = KEY_LENGTH - KEY_PREFIX.length;
/** Characters of the value shown after creation: the prefix plus four random characters. */
export const DISPLAY_PREFIX_LENGTH = KEY_PREFIX.length + 4;

const KEY_PATTERN = new RegExp(`^${KEY_PREFIX}[A-Za-z0-9]{${RANDOM_LENGTH}}$`);

export function generateKeyValue(): string {
  return KEY_PREFIX + randomBase62(RANDOM_LENGTH);
}

export function isWellFormedKey(value: string): boolean {
  return value.length === KEY_LENGTH && KEY_PATTERN.test(value);
}

export function displayPrefix(value: string): string {
  return value.slice(0, DISPLAY_PREFIX_LENGTH);
}

export type KeyHasher = (value: string) => string;

export function keyHasher(secret?: string): KeyHasher {
  return secret
    ? (value) => createHmac('sha256', secret).update(value).digest('hex')
    : // crypto.hash: the one-shot digest, without a Hash object per call (every proxied request hashes its key).
      (value) => hash('sha256', value, 'hex');
}

/** Constant-time equality of two hex digests of equal length. */
export function sameDigest(a: string, b: string): boolean {
  const x = Buffer.from(a, 'hex');
  const y = Buffer.from(b, 'hex');
  return x.length === y.length && timingSafeEqual(x, y);
}
