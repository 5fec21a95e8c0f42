// Gated models: the hub token given at provisioning, its Secret, and the failures without it.
import { describe, expect, it } from 'vitest';
import { KIND } from '@berth/crds';
import { kubectlOk } from '../../cluster/env.ts';
import { bearer } from '../../support/api.ts';
import { eventually } from '../../support/eventually.ts';
import { api, acct, ns, provision, waitStatus, useDedicatedEndpoints } from './fixture.ts';

useDedicatedEndpoints();

describe('gated models', () => {
  it('a hub token given at provisioning is checked, stored in a Secret the endpoint owns, never shown', async () => {
    const good = await provision({
      model: 'org/gated',
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      hubToken: 'hf_good',
    });
    expect(good.status).toBe(201);
    expect(JSON.stringify(good.body)).not.toContain('hf_good');
    const id = good.body.id;
    const secret = JSON.parse(
      await kubectlOk(['get', 'secret', `${id}-hub-token`, '-n', ns.name, '-o', 'json']),
    );
    expect(Buffer.from(secret.data.token, 'base64').toString()).toBe('hf_good');
    expect(secret.metadata.ownerReferences).toEqual([expect.objectContaining({ kind: KIND, name: id })]);
    const cr = JSON.parse(await kubectlOk(['get', 'dedicatedendpoint', id, '-n', ns.name, '-o', 'json']));
    expect(cr.spec.model.hubTokenSecretRef).toEqual({ name: `${id}-hub-token`, key: 'token' });
    const up = await waitStatus(id, 'up', 90_000);
    expect(JSON.stringify(up)).not.toContain('hf_good');

    const wrong = await provision({
      model: 'org/gated',
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      hubToken: 'hf_wrong',
    });
    expect(await waitStatus(wrong.body.id, 'failed', 60_000)).toMatchObject({ reason: 'HubTokenInvalid' });
    const none = await provision({
      model: 'org/gated',
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
    });
    expect(await waitStatus(none.body.id, 'failed', 60_000)).toMatchObject({ reason: 'GatedModelNoToken' });

    // Terminating the endpoint removes its token.
    expect(
      (await fetch(`${api.url}/api/endpoints/${id}`, { method: 'DELETE', headers: bearer(acct.compute) }))
        .status,
    ).toBe(200);
    await eventually(
      async () => {
        const r = await kubectlOk([
          'get',
          'secret',
          '-n',
          ns.name,
          '-l',
          `berth.dev/endpoint=${id}`,
          '-o',
          'name',
        ]);
        expect(r.trim()).toBe('');
      },
      { timeout: 60_000 },
    );
  }, 200_000);
});
