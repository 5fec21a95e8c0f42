import type { DedicatedEndpoint } from '@berth/crds';
import { DEFAULT_CATALOG, DedicatedEndpointSpecSchema } from '@berth/crds';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HubToken } from '../src/core/preflight.ts';
import { preflight, weightBytes } from '../src/core/preflight.ts';
import { startFakeHub } from '@berth/test/support/fake-hub';

let hub: Awaited<ReturnType<typeof startFakeHub>>;
beforeAll(async () => {
  hub = await startFakeHub();
});
afterAll(() => hub.close());

const l4 = DEFAULT_CATALOG.instanceTypes.find((t) => t.id === 'nvidia-l4-24gb')!;
const ep = (id: string, gpuCount = 1): DedicatedEndpoint => ({
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'DedicatedEndpoint',
  metadata: { name: 'endpt-x', namespace: 'ns' },
  spec: DedicatedEndpointSpecSchema.parse({
    account: 'a',
    model: { id },
    hardware: { gpuType: l4.id, gpuCount },
  }),
});
const none: HubToken = { kind: 'none' };
const run = (id: string, token: HubToken = none, gpuCount = 1) =>
  preflight(ep(id, gpuCount), l4, token, { hfEndpoint: hub.url, gpuMemoryUtilization: 0.9, timeoutMs: 2000 });

describe('preflight against a hub', () => {
  it('passes a small public model', async () => {
    expect(await run('org/small')).toMatchObject({ kind: 'passed' });
  });

  it('refuses a model too large for the hardware, saying what to pick', async () => {
    const r = await run('org/huge', none, 4);
    expect(r).toMatchObject({ kind: 'failed', reason: 'ModelTooLarge' });
    expect(r.kind === 'failed' && r.message).toMatch(/754\.4 GiB .* 86\.4 GiB usable on 4 × nvidia-l4-24gb/);
  });

  it('needs a token for a gated model, and one with access', async () => {
    expect(await run('org/gated')).toMatchObject({ kind: 'failed', reason: 'GatedModelNoToken' });
    expect(await run('org/gated', { kind: 'found', token: 'hf_bad' })).toMatchObject({
      kind: 'failed',
      reason: 'HubTokenInvalid',
    });
    expect(await run('org/gated', { kind: 'found', token: 'hf_good' })).toMatchObject({ kind: 'passed' });
    expect(await run('org/gated', { kind: 'missing', message: 'no secret' })).toEqual({
      kind: 'failed',
      reason: 'GatedModelNoToken',
      message: 'no secret',
    });
  });

  it('tells a missing model from a bad token', async () => {
    expect(await run('org/nope')).toMatchObject({ kind: 'failed', reason: 'GatedModelNoToken' }); // 401: maybe private
    expect(await run('org/nope', { kind: 'found', token: 'hf_good' })).toMatchObject({
      kind: 'failed',
      reason: 'ModelNotFound',
    });
  });

  it('passes when the size is unknown (runtime OOM detection remains)', async () => {
    expect(await run('org/unknown-size')).toEqual({ kind: 'passed' });
  });

  it('reports an unreachable or failing hub as unavailable, not failed', async () => {
    hub.setDown(true);
    expect(await run('org/small')).toMatchObject({ kind: 'unavailable' });
    hub.setDown(false);
    const r = await preflight(ep('org/small'), l4, none, {
      hfEndpoint: 'http://127.0.0.1:1',
      gpuMemoryUtilization: 0.9,
      timeoutMs: 500,
    });
    expect(r.kind).toBe('unavailable');
  });

  it('weighs parameters by dtype', () => {
    expect(weightBytes({ safetensors: { parameters: { BF16: 10, F32: 1, I8: 4 } } })).toBe(28);
    expect(weightBytes({ safetensors: { total: 5 } })).toBe(10);
    expect(weightBytes({})).toBeUndefined();
  });
});
