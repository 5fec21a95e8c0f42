// What callers see while an endpoint is building or after it failed.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { bearer } from '../../support/api.ts';
import { eventually } from '../../support/eventually.ts';
import { kubectlOk } from '../../cluster/env.ts';
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
  ns,
} from './fixture.ts';

useDedicatedEndpoints();

async function kubectlGet(id: string) {
  return JSON.parse(await kubectlOk(['get', 'dedicatedendpoint', id, '-n', ns.name, '-o', 'json']));
}

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

  it('failed: wake is 409 with a hint, and a PATCH of the hardware builds it again up to `up`', async () => {
    const { body } = await provision({
      model: 'org/mid',
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
    });
    const failed = await waitStatus(body.id, 'failed', 60_000);
    expect(failed.reason).toBe('ModelTooLarge');
    const wake = await fetch(`${api.url}/api/endpoints/${body.id}/wake`, {
      method: 'POST',
      headers: bearer(acct.compute),
    });
    expect(wake.status).toBe(409);
    expect((await wake.json()).code).toBe('endpoint_not_wakeable');

    const patched = await fetch(`${api.url}/api/endpoints/${body.id}`, {
      method: 'PATCH',
      headers: json(acct.compute),
      body: JSON.stringify({ hardware: { gpuType: 'nvidia-h100-80gb' } }),
    });
    expect(patched.status).toBe(200);
    const generation = (await patched.json()).generation;
    expect(generation).toBeGreaterThan(failed.generation);
    const up = await waitStatus(body.id, 'up', 90_000);
    expect(up).toMatchObject({ observedGeneration: generation, hardware: { gpuType: 'nvidia-h100-80gb' } });
    // What the cluster holds: the resource's spec changed in place, same object.
    const cr = await kubectlGet(body.id);
    expect(cr.spec.hardware.gpuType).toBe('nvidia-h100-80gb');
    expect(cr.metadata.generation).toBe(generation);
  }, 180_000);

  it('PUT creates a resource named by the caller, the same one kubectl sees; a second PUT changes nothing', async () => {
    const id = 'endpt-put-k8s';
    const put = () =>
      fetch(`${api.url}/api/endpoints/${id}`, {
        method: 'PUT',
        headers: json(acct.compute),
        body: JSON.stringify({ model: 'org/small', hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 } }),
      });
    expect((await put()).status).toBe(201);
    const first = await kubectlGet(id);
    expect(first.spec.account).toBe(acct.id);
    await waitStatus(id, 'up', 90_000);
    const again = await put();
    expect(again.status).toBe(200);
    expect((await kubectlGet(id)).metadata.generation).toBe(first.metadata.generation);
  }, 180_000);
});
