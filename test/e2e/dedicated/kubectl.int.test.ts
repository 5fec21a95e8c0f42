// Endpoints created with kubectl are served like the API's own; Public ones need no key.
import { describe, expect, it } from 'vitest';
import { bearer } from '../../support/api.ts';
import { api, acct, waitStatus, kubectlApplyEndpoint, useDedicatedEndpoints } from './fixture.ts';

useDedicatedEndpoints();

describe('endpoints created with kubectl', () => {
  it('are served like the API’s own; Public needs no key and is rate-limited per client', async () => {
    const id = 'endpt-kubectl-public';
    await kubectlApplyEndpoint(id, {
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      authMode: 'Public',
    });
    await waitStatus(id, 'up', 90_000);
    const listed = await (await fetch(api.url + '/api/endpoints', { headers: bearer(acct.global) })).json();
    expect(listed.data.map((e: { id: string }) => e.id)).toContain(id);

    const call = () =>
      fetch(`${api.url}/api/d/${id}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'org/small', messages: [{ role: 'user', content: 'hi' }] }),
      });
    const statuses = [];
    let limited: Response | undefined;
    for (let i = 0; i < 6; i++) {
      const r = await call();
      statuses.push(r.status);
      if (r.status === 429) limited = r;
      else await r.arrayBuffer();
    }
    expect(statuses.slice(0, 4)).toEqual([200, 200, 200, 200]);
    expect(statuses[4]).toBe(429);
    expect(limited!.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(limited!.headers.get('x-ratelimit-limit-requests')).toBe('4');
    expect(limited!.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    const body = await limited!.json();
    expect(body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limited' });
  });
});
