import { describe, expect, it } from 'vitest';
import { newSecretsKey, parseSecretsKey, sealer } from '../src/platform/sealed.ts';
import { parseConfig } from '../src/platform/config.ts';

describe('sealed secrets', () => {
  const s = sealer(parseSecretsKey(newSecretsKey())!);

  it('opens what it sealed, for the same owner only', () => {
    const sealed = s.seal('{"Authorization":"Bearer x"}', 'tool:a');
    expect(sealed).toMatch(/^v1\.[\w-]+\.[\w-]+\.[\w-]+$/);
    expect(sealed).not.toContain('Bearer');
    expect(s.open(sealed, 'tool:a')).toBe('{"Authorization":"Bearer x"}');
    expect(() => s.open(sealed, 'tool:b')).toThrow();
    expect(s.seal('same', 'tool:a')).not.toBe(s.seal('same', 'tool:a')); // fresh IV each time
  });

  it('refuses another key, tampering and garbage', () => {
    const sealed = s.seal('secret', 'tool:a');
    const other = sealer(parseSecretsKey(newSecretsKey())!);
    expect(() => other.open(sealed, 'tool:a')).toThrow();
    const parts = sealed.split('.');
    parts[3] = Buffer.from('tampered').toString('base64url');
    expect(() => s.open(parts.join('.'), 'tool:a')).toThrow();
    expect(() => s.open('plain', 'tool:a')).toThrow('not a sealed value');
  });

  it('BERTH_SECRETS_KEY: 64 hex digits or base64 of 32 bytes; anything else stops start-up naming it', () => {
    expect(parseSecretsKey('ab'.repeat(32))?.length).toBe(32);
    expect(parseSecretsKey(Buffer.alloc(32, 7).toString('base64'))?.length).toBe(32);
    expect(parseSecretsKey('short')).toBeUndefined();
    expect(() => parseConfig({ BERTH_SECRETS_KEY: 'short' })).toThrow(
      /BERTH_SECRETS_KEY: must be 32 bytes as 64 hex digits or base64 .*\(got "\*\*\*"\)/,
    );
  });
});
