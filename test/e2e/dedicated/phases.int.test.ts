// What callers see while an endpoint is building or after it failed.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { bearer } from '../../support/api.ts';
import { eventually } from '../../support/eventually.ts';
import {
  api,
  acct,
  json,
  provision,
  getEndpoint,
  waitStatus,
  sdk,
  kubectlApplyEndpoint,
  useDedicatedEndpoints,
} from './fixture.ts';

useDedicatedEndpoints();

describe('phases seen by callers', () => {
  it('building: 503 endpoint_building with Retry-After', async () => {
    const id = 'endpt-slow-build';
    await kubectlApplyEndpoint(id, {
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      engine: { podAnnotations: { 'sim.berth.dev/ready-after': '1h' } },
    });
    await eventually(async () => expect(await getEndpoint(id)).toMatchObject({ status: 'building' }), {
      timeout: 20_000,
    });
    const res = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: json(acct.inference),
      body: JSON.stringify({ model: 'org/small', messages: [] }),
    });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('30');
    expect((await res.json()).error).toMatchObject({ code: 'endpoint_building', type: 'api_error' });
  });

  it('failed: 424 with the reason, and the logs show the cause', async () => {
    const { body } = await provision({
      model: 'org/huge',
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
    });
    const failed = await waitStatus(body.id, 'failed', 60_000);
    expect(failed).toMatchObject({ label: 'FAILED', reason: 'ModelTooLarge' });
    const err = await sdk(body.id, acct.inference)
      .chat.completions.create({ model: 'org/huge', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(424);
    expect((err as Error).message).toContain('ModelTooLarge');
    const logs = await (
      await fetch(`${api.url}/api/endpoints/${body.id}/logs`, { headers: bearer(acct.compute) })
    ).text();
    expect(logs).toContain('phase: failed (ModelTooLarge)');
    expect(logs).toContain(failed.message.split('\n')[0]);
  });
});
