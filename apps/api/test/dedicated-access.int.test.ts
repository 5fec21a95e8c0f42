// Who may call /api/d/<id>/… on a local-mode API: a Public endpoint takes calls without a key within
// its rate limits, per client address and per endpoint; without a key, nothing tells whether an
// endpoint id exists.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, type TestApi } from '@berth/test/support/api';
import { startLocalApi, type LocalApi } from './support/local-api.ts';

let local: LocalApi;
let api: TestApi;
let acct: LocalApi['acct'];

beforeAll(async () => {
  local = await startLocalApi({
    TRUST_PROXY: 'true',
    PUBLIC_RATE_LIMIT_PER_ENDPOINT: '10',
    PUBLIC_RATE_LIMIT_PER_CLIENT: '3',
  });
  ({ api, acct } = local);
});

afterAll(async () => {
  await local?.stop();
});

const chat = (id: string, headers: Record<string, string>) =>
  fetch(`${api.url}/api/d/${id}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-berth-hold': 'false', ...headers },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
  });

describe('one client cannot lock everyone out of a Public endpoint', () => {
  it('requests the per-client limit refused do not count against the endpoint', async () => {
    const id = await local.createEndpoint({ authMode: 'Public' });
    const noisy = { 'x-forwarded-for': '203.0.113.7' };
    const statuses = [];
    for (let i = 0; i < 25; i++) statuses.push((await chat(id, noisy)).status);
    expect(statuses.filter((s) => s === 429)).toHaveLength(22);
    // Another client still gets through (the endpoint is building: 503, not 429).
    const other = await chat(id, { 'x-forwarded-for': '198.51.100.9' });
    expect(other.status).not.toBe(429);
    expect(other.headers.get('x-ratelimit-remaining-requests')).toBe('2');
  });
});

describe('no key, no way to tell whether an endpoint id exists', () => {
  it('answers 401 for an unknown id and a Private one alike', async () => {
    const id = await local.createEndpoint();
    const unknown = await chat('endpt-doesnotexist0', {});
    const existing = await chat(id, {});
    expect(unknown.status).toBe(401);
    expect(existing.status).toBe(401);
    expect(await unknown.json()).toEqual(await existing.json());
    // With the owner's key the unknown id is a 404.
    expect((await chat('endpt-doesnotexist0', bearer(acct.inference))).status).toBe(404);
  });
});
