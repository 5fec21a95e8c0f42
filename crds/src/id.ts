import { randomBytes } from 'node:crypto';
import { ENDPOINT_ID_PREFIX } from './constants.ts';

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567'; // RFC 4648 base32, lowercased: DNS-1123 safe

/** A new endpoint id: `endpt-` + 14 random base32 characters (70 bits), 20 characters in all. */
export function newEndpointId(): string {
  const bytes = randomBytes(14);
  let suffix = '';
  for (const b of bytes) suffix += ALPHABET[b & 31];
  return ENDPOINT_ID_PREFIX + suffix;
}

/** DNS-1035 label (Service names need it) with the endpoint prefix; at most 63 characters. */
export const ENDPOINT_ID_PATTERN = /^endpt-[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
export const ENDPOINT_ID_MAX_LENGTH = 63;

export function isEndpointId(value: string): boolean {
  return value.length <= ENDPOINT_ID_MAX_LENGTH && ENDPOINT_ID_PATTERN.test(value);
}
