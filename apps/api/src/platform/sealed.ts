// Secrets at rest (MCP servers' credentials, and anything else the platform must send on a user's
// behalf): AES-256-GCM under BERTH_SECRETS_KEY, bound to what they belong to (the associated data,
// e.g. `tool:<id>`), so a sealed value copied to another row does not open. Format:
// `v1.<iv>.<tag>.<ciphertext>`, each part base64url.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

export interface Sealer {
  seal(plaintext: string, boundTo: string): string;
  /** Throws when the value was not sealed with this key for `boundTo`. */
  open(sealed: string, boundTo: string): string;
}

/** BERTH_SECRETS_KEY: 32 bytes as 64 hex digits or base64. Undefined when it is neither. */
export function parseSecretsKey(text: string): Buffer | undefined {
  const t = text.trim();
  if (/^[0-9a-fA-F]{64}$/.test(t)) return Buffer.from(t, 'hex');
  if (/^[A-Za-z0-9+/_-]{43}=?$/.test(t)) {
    const b = Buffer.from(t, 'base64');
    return b.length === 32 ? b : undefined;
  }
  return undefined;
}

export function newSecretsKey(): string {
  return randomBytes(32).toString('hex');
}

export function sealer(key: Buffer): Sealer {
  if (key.length !== 32) throw new Error('a secrets key is 32 bytes');
  return {
    seal(plaintext, boundTo) {
      const iv = randomBytes(12);
      const c = createCipheriv('aes-256-gcm', key, iv);
      c.setAAD(Buffer.from(boundTo));
      const data = Buffer.concat([c.update(plaintext, 'utf8'), c.final()]);
      return ['v1', iv, c.getAuthTag(), data]
        .map((p) => (typeof p === 'string' ? p : p.toString('base64url')))
        .join('.');
    },
    open(sealed, boundTo) {
      const [v, iv, tag, data] = sealed.split('.');
      if (v !== 'v1' || iv === undefined || tag === undefined || data === undefined)
        throw new Error('not a sealed value');
      const d = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
      d.setAAD(Buffer.from(boundTo));
      d.setAuthTag(Buffer.from(tag, 'base64url'));
      return Buffer.concat([d.update(Buffer.from(data, 'base64url')), d.final()]).toString('utf8');
    },
  };
}
