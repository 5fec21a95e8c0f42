import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../src/platform/config.ts';

describe('configuration', () => {
  it('has defaults that run on a laptop with nothing set', () => {
    const c = parseConfig({});
    expect(c.PORT).toBe(8080);
    expect(c.DATABASE_URL).toBeUndefined();
    expect(c.BERTH_DATA_DIR).toBe('.data');
    expect(c.MAX_BODY_BYTES).toBe(1_048_576);
    expect(c.BERTH_MODELS_FILE).toBeUndefined();
  });

  it('treats empty variables as unset', () => {
    expect(parseConfig({ PORT: '', DATABASE_URL: '' }).PORT).toBe(8080);
  });

  it('names the variable and says what to fix', () => {
    const attempt = (env: Record<string, string>) => {
      try {
        parseConfig(env);
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        return (err as Error).message;
      }
      throw new Error('expected a ConfigError');
    };
    expect(attempt({ PORT: 'eighty' })).toContain('PORT: must be a number');
    expect(attempt({ PORT: '70000' })).toContain('PORT: must be between 0 and 65535 (got "70000")');
    expect(attempt({ DATABASE_URL: 'mysql://x' })).toContain(
      'DATABASE_URL: must be a postgres:// or postgresql:// URL',
    );
    expect(attempt({ DATABASE_URL: 'postgres://x/y' })).toContain(
      'ADMIN_TOKEN: is required when DATABASE_URL is set',
    );
    expect(attempt({ ADMIN_TOKEN: 'short' })).toContain('ADMIN_TOKEN: must be at least 16 characters');
    expect(attempt({ ADMIN_TOKEN: 'short' })).not.toContain('"short"');
    expect(attempt({ LOG_LEVEL: 'loud' })).toContain('LOG_LEVEL: must be one of');
  });

  it('has finite per-account quotas, each a positive whole number', () => {
    const c = parseConfig({});
    expect([c.BERTH_QUOTA_KEYS, c.BERTH_QUOTA_ENDPOINTS, c.BERTH_QUOTA_GPUS]).toEqual([100, 20, 64]);
    expect(parseConfig({ BERTH_QUOTA_GPUS: '8' }).BERTH_QUOTA_GPUS).toBe(8);
    expect(() => parseConfig({ BERTH_QUOTA_KEYS: '0' })).toThrow(
      'BERTH_QUOTA_KEYS: must be greater than 0 (got "0")',
    );
    expect(() => parseConfig({ BERTH_QUOTA_ENDPOINTS: 'lots' })).toThrow(
      'BERTH_QUOTA_ENDPOINTS: must be a number (dedicated endpoints) (got "lots")',
    );
    expect(() => parseConfig({ BERTH_QUOTA_GPUS: '1.5' })).toThrow(
      'BERTH_QUOTA_GPUS: must be a whole number (got "1.5")',
    );
  });

  it('has a Chronos pre-warm lead in whole seconds, 0 to 3600 (0: off)', () => {
    expect(parseConfig({}).CHRONOS_PREWARM_SECONDS).toBe(120);
    expect(parseConfig({ CHRONOS_PREWARM_SECONDS: '0' }).CHRONOS_PREWARM_SECONDS).toBe(0);
    expect(() => parseConfig({ CHRONOS_PREWARM_SECONDS: 'soon' })).toThrow(
      'CHRONOS_PREWARM_SECONDS: must be a whole number of seconds (0 turns pre-warm off)',
    );
    expect(() => parseConfig({ CHRONOS_PREWARM_SECONDS: '-5' })).toThrow(
      'CHRONOS_PREWARM_SECONDS: must be at least 0 (0 turns pre-warm off)',
    );
    expect(() => parseConfig({ CHRONOS_PREWARM_SECONDS: '7200' })).toThrow(
      'CHRONOS_PREWARM_SECONDS: must be at most 3600 (an hour)',
    );
    expect(() => parseConfig({ CHRONOS_PREWARM_SECONDS: '1.5' })).toThrow(
      'CHRONOS_PREWARM_SECONDS: must be a whole number of seconds (0 turns pre-warm off)',
    );
  });

  it('samples engine load every second by default; 0 turns it off; nonsense is refused', () => {
    expect(parseConfig({}).ENGINE_LOAD_SAMPLE_MS).toBe(250);
    expect(parseConfig({ ENGINE_LOAD_SAMPLE_MS: '0' }).ENGINE_LOAD_SAMPLE_MS).toBe(0);
    expect(parseConfig({ ENGINE_LOAD_SAMPLE_MS: '250' }).ENGINE_LOAD_SAMPLE_MS).toBe(250);
    expect(() => parseConfig({ ENGINE_LOAD_SAMPLE_MS: '10' })).toThrow(
      'ENGINE_LOAD_SAMPLE_MS: must be 0 (off) or between 100 and 60000 milliseconds (got "10")',
    );
    expect(() => parseConfig({ ENGINE_LOAD_SAMPLE_MS: '-1' })).toThrow(
      'ENGINE_LOAD_SAMPLE_MS: must be 0 (off) or between 100 and 60000 milliseconds (got "-1")',
    );
    expect(() => parseConfig({ ENGINE_LOAD_SAMPLE_MS: '1s' })).toThrow(
      'ENGINE_LOAD_SAMPLE_MS: must be a number (milliseconds; 0 turns sampling off) (got "1s")',
    );
    expect(() => parseConfig({ ENGINE_LOAD_SAMPLE_MS: '1.5' })).toThrow(
      'ENGINE_LOAD_SAMPLE_MS: must be a whole number (got "1.5")',
    );
  });

  it('tells the operator of wakes only with its token: BERTH_OPERATOR_URL needs BERTH_WAKE_TOKEN', () => {
    expect(() => parseConfig({ BERTH_OPERATOR_URL: 'http://berth-operator-wake.berth.svc:8080' })).toThrow(
      "BERTH_WAKE_TOKEN: is required with BERTH_OPERATOR_URL: the operator's BERTH_WAKE_TOKEN",
    );
    expect(() =>
      parseConfig({ BERTH_OPERATOR_URL: 'operator:8080', BERTH_WAKE_TOKEN: 'x'.repeat(16) }),
    ).toThrow(
      'BERTH_OPERATOR_URL: must be a URL such as http://berth-operator-wake.berth.svc:8080 (got "operator:8080")',
    );
    expect(() => parseConfig({ BERTH_OPERATOR_URL: 'http://op:8080', BERTH_WAKE_TOKEN: 'short' })).toThrow(
      'BERTH_WAKE_TOKEN: must be at least 16 characters (got "***")',
    );
    const c = parseConfig({ BERTH_OPERATOR_URL: 'http://op:8080', BERTH_WAKE_TOKEN: 'x'.repeat(16) });
    expect([c.BERTH_OPERATOR_URL, c.BERTH_WAKE_TOKEN]).toEqual(['http://op:8080', 'x'.repeat(16)]);
  });

  it('reports every problem at once', () => {
    expect(() => parseConfig({ PORT: 'x', MAX_BODY_BYTES: '-1' })).toThrow(/PORT[\s\S]*MAX_BODY_BYTES/);
  });
});
