import { describe, expect, it } from 'vitest';
import { configFromEnv } from '../src/config.ts';

describe('configFromEnv', () => {
  it('has working defaults', () => {
    const c = configFromEnv({});
    expect(c).toMatchObject({
      namespace: '',
      hfEndpoint: 'https://huggingface.co',
      engineImage: 'vllm/vllm-openai:v0.11.0',
      modelCache: { kind: 'hostPath', path: '/var/lib/berth/hf-cache' },
      leaderElection: true,
      leaseNamespace: 'berth-system',
      metricsPort: 8080,
    });
    expect(c.catalog.instanceTypes.length).toBeGreaterThan(0);
  });

  it('parses cache modes', () => {
    expect(configFromEnv({ BERTH_MODEL_CACHE: 'pvc:200Gi:fast' }).modelCache).toEqual({
      kind: 'pvc',
      sizeGiB: 200,
      accessMode: 'ReadWriteOnce',
      storageClassName: 'fast',
    });
    expect(configFromEnv({ BERTH_MODEL_CACHE: 'emptyDir' }).modelCache).toEqual({ kind: 'emptyDir' });
  });

  it('names every variable to fix', () => {
    let message = '';
    try {
      configFromEnv({
        HF_ENDPOINT: 'not a url',
        BERTH_WAKE_TIMEOUT_SECONDS: 'soon',
        BERTH_MODEL_CACHE: 'nfs',
        BERTH_NAMESPACE: 'Bad_NS',
      });
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/^ {2}HF_ENDPOINT: must be a URL/m);
    expect(message).toMatch(/^ {2}BERTH_WAKE_TIMEOUT_SECONDS: .*number of seconds/m);
    expect(message).toMatch(/^ {2}BERTH_MODEL_CACHE: BERTH_MODEL_CACHE must be hostPath/m);
    expect(message).toMatch(/^ {2}BERTH_NAMESPACE: BERTH_NAMESPACE must be a namespace name/m);
    expect(() => configFromEnv({ BERTH_CATALOG_FILE: '/nope.yaml' })).toThrowError(
      /BERTH_CATALOG_FILE=\/nope.yaml cannot be read/,
    );
  });
});
