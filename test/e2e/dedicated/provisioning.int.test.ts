// Provisioning through the API: create, validate against the catalog, list, 403/404 across accounts.
import { describe, expect, it } from 'vitest';
import { kubectlOk } from '../../cluster/env.ts';
import { bearer } from '../../support/api.ts';
import {
  api,
  acct,
  other,
  ns,
  provision,
  getEndpoint,
  waitStatus,
  useDedicatedEndpoints,
} from './fixture.ts';

useDedicatedEndpoints();

let small: string;

describe('provisioning through the API', () => {
  it('POST /api/endpoints creates an endpoint that goes building → up', async () => {
    const { status, body } = await provision({
      name: 'my-small',
      model: 'org/small',
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 900 },
    });
    expect(status).toBe(201);
    expect(body).toMatchObject({
      id: expect.stringMatching(/^endpt-[a-z2-7]{14}$/),
      name: 'my-small',
      model: 'org/small',
      status: 'building',
      label: 'PROVISIONING',
      authMode: 'Private',
      baseUrl: `${api.url}/api/d/${body.id}`,
    });
    small = body.id;
    const cr = JSON.parse(await kubectlOk(['get', 'dedicatedendpoint', small, '-n', ns.name, '-o', 'json']));
    expect(cr.spec).toMatchObject({
      account: acct.id,
      model: { id: 'org/small' },
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
    });
    const up = await waitStatus(small, 'up', 90_000);
    expect(up).toMatchObject({ label: 'ONLINE', readyReplicas: 1 });
  });

  it('GET /api/hardware lists the catalog', async () => {
    const res = await fetch(api.url + '/api/hardware', { headers: bearer(acct.inference) });
    const { data } = await res.json();
    expect(data.find((t: { id: string }) => t.id === 'nvidia-h100-80gb')).toEqual({
      id: 'nvidia-h100-80gb',
      displayName: 'NVIDIA H100 80GB',
      gpuType: 'NVIDIA H100 80GB',
      gpuMemoryGiB: 80,
      allowedGpuCounts: [1, 2, 4, 8],
      available: true,
      // The price GPU time is invoiced at, from the catalog, in the billing currency.
      pricePerGpuHour: '2.500000',
      currency: 'USD',
    });
  });

  it('refuses bad hardware and bad bodies with 400, creating nothing', async () => {
    const before = (await (await fetch(api.url + '/api/endpoints', { headers: bearer(acct.global) })).json())
      .data.length;
    const cases: [Record<string, unknown>, string][] = [
      [
        { model: 'org/small', hardware: { gpuType: 'tpu-v9', gpuCount: 1 } },
        'Invalid request body: hardware.gpuType: unknown GPU type "tpu-v9"',
      ],
      [
        { model: 'org/small', hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 3 } },
        'Invalid request body: hardware.gpuCount: gpuCount 3 is not offered for nvidia-h100-80gb; one of: 1, 2, 4, 8',
      ],
      [
        { model: 'org/small' },
        'Invalid request body: hardware: Invalid input: expected object, received undefined',
      ],
      [
        {
          model: 'org/small',
          hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
          scaling: { minReplicas: 2, maxReplicas: 1 },
        },
        'Invalid request body: scaling.minReplicas: must be less than or equal to scaling.maxReplicas',
      ],
      [
        { model: 'org/small', hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 }, authMode: 'Open' },
        'Invalid request body: authMode: must be "Private" or "Public"',
      ],
    ];
    for (const [body, message] of cases) {
      const r = await provision(body);
      expect(r.status, message).toBe(400);
      expect(r.body.error).toContain(message);
    }
    const inference = await provision(
      { model: 'org/small', hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 } },
      acct.inference,
    );
    expect(inference.status).toBe(403);
    const after = (await (await fetch(api.url + '/api/endpoints', { headers: bearer(acct.global) })).json())
      .data.length;
    expect(after).toBe(before);
  });

  it("another account's endpoint: 403 on management routes, unknown ids 404", async () => {
    for (const [method, path] of [
      ['GET', ''],
      ['DELETE', ''],
      ['POST', '/wake'],
      ['GET', '/logs'],
    ] as const) {
      const res = await fetch(`${api.url}/api/endpoints/${small}${path}`, {
        method,
        headers: bearer(other.global),
      });
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(await res.json()).toEqual({
        error: 'Unauthorized access to dedicated endpoint',
        code: 'endpoint_not_owned',
      });
    }
    const unknown = await fetch(`${api.url}/api/endpoints/endpt-doesnotexist`, {
      headers: bearer(acct.global),
    });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({
      error: 'Dedicated endpoint endpt-doesnotexist not found',
      code: 'not_found',
    });
    expect((await getEndpoint(small)).status).toBe('up');
    const listed = await (await fetch(api.url + '/api/endpoints', { headers: bearer(other.global) })).json();
    expect(listed.data).toEqual([]);
  });
});
