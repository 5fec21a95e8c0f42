import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../src/platform/config.ts';
import { engineCommand } from '../src/dedicated/local/index.ts';
import { runtimeKind } from '../src/dedicated/runtimes.ts';

describe('runtime selection and local-mode configuration', () => {
  it('auto: Kubernetes when configured, else local on the embedded database, else none', () => {
    expect(runtimeKind(parseConfig({}), false)).toBe('local');
    expect(runtimeKind(parseConfig({ KUBECONFIG: '/k' }), false)).toBe('kubernetes');
    expect(runtimeKind(parseConfig({}), true)).toBe('kubernetes');
    const pg = { DATABASE_URL: 'postgres://x/y', ADMIN_TOKEN: 'a-long-enough-admin-token' };
    expect(runtimeKind(parseConfig(pg), false)).toBe('none');
    expect(runtimeKind(parseConfig({ ...pg, BERTH_RUNTIME: 'local' }), false)).toBe('local');
    expect(runtimeKind(parseConfig({ BERTH_RUNTIME: 'kubernetes' }), false)).toBe('kubernetes');
  });

  it('validates the local-mode variables', () => {
    const c = parseConfig({ BERTH_LOCAL_ENGINE_ARGS: ' --startup-delay-ms  3000 --ttft-ms 5 ' });
    expect(c.BERTH_LOCAL_ENGINE_ARGS).toEqual(['--startup-delay-ms', '3000', '--ttft-ms', '5']);
    expect(c.BERTH_LOCAL_ENGINE).toBe('sim');
    expect(c.HF_ENDPOINT).toBeUndefined();
    expect(() => parseConfig({ BERTH_RUNTIME: 'docker' })).toThrow(
      /BERTH_RUNTIME: must be auto, kubernetes or local/,
    );
    expect(() => parseConfig({ BERTH_LOCAL_ENGINE: 'tgi' })).toThrow(
      /BERTH_LOCAL_ENGINE: must be sim or vllm/,
    );
    expect(() => parseConfig({ HF_ENDPOINT: 'hub' })).toThrow(/HF_ENDPOINT: must be a URL/);
  });

  it('BERTH_LOCAL_ENGINE=vllm needs vllm on PATH, and says so', () => {
    expect(() => engineCommand('vllm', { PATH: '/nonexistent' })).toThrow(ConfigError);
    expect(() => engineCommand('vllm', { PATH: '/nonexistent' })).toThrow(/no `vllm` executable is on PATH/);
    expect(engineCommand('sim').prefix[0]).toMatch(/engine-sim\/src\/main\.ts$/);
  });
});
