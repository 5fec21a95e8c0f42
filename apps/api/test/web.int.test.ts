// The dashboard's static build on the API's origin: its files, index.html for its own paths, and
// API paths that never fall back to it. Needs `npm run build -w @berth/web` (npm install runs it).
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '@berth/test/support/api';
import { WEB_DIR } from '../src/server.ts';

let api: TestApi;
beforeAll(async () => {
  api = await startTestApi();
});
afterAll(async () => api?.stop());

describe('the dashboard served by the API', () => {
  it('serves index.html at / and at the dashboard’s own paths', async () => {
    for (const p of ['/', '/endpoints', '/endpoints/endpt-abc', '/settings/keys', '/playground']) {
      const res = await fetch(api.url + p, { headers: { accept: 'text/html' } });
      expect(res.status, p).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/html/);
      expect(res.headers.get('cache-control')).toBe('no-cache');
      expect(await res.text()).toContain('<div id="root"></div>');
    }
  });

  it('serves the hashed assets with a long cache life', async () => {
    const asset = readdirSync(path.join(WEB_DIR, 'assets')).find((f) => f.endsWith('.js'))!;
    const res = await fetch(`${api.url}/assets/${asset}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/javascript/);
    expect(res.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    const missing = await fetch(`${api.url}/assets/nope.js`);
    expect(missing.status).toBe(404);
  });

  it('never answers API paths with the dashboard', async () => {
    for (const p of ['/api/nope', '/auth/nope']) {
      const res = await fetch(api.url + p, { headers: { accept: 'text/html' } });
      expect(res.status, p).toBe(404);
      expect(await res.json()).toEqual({ error: 'Not found', code: 'not_found' });
    }
  });
});
