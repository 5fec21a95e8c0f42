// The dashboard's static build on the API's origin: its files, index.html for its own paths, and
// API paths that never fall back to it; the pages' Content-Security-Policy and frame protection, the
// development identity provider's too. Needs `npm run build -w @berth/web` (npm install runs it).
import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '@berth/test/support/api';
import { WEB_DIR } from '../src/server.ts';

let api: TestApi;
beforeAll(async () => {
  api = await startTestApi({ BERTH_DEV_IDP: 'true' });
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

const PAGE_POLICY =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

describe('the security headers of the pages', () => {
  const framed = (res: Response) => ({
    csp: res.headers.get('content-security-policy'),
    frame: res.headers.get('x-frame-options'),
    sniff: res.headers.get('x-content-type-options'),
    referrer: res.headers.get('referrer-policy'),
  });

  it('the dashboard and its files: same origin only, never framed', async () => {
    const asset = readdirSync(path.join(WEB_DIR, 'assets')).find((f) => f.endsWith('.js'))!;
    for (const p of ['/', '/settings/keys', `/assets/${asset}`, '/favicon.svg']) {
      const res = await fetch(api.url + p, { headers: { accept: 'text/html' } });
      expect(res.status, p).toBe(200);
      expect(framed(res), p).toEqual({
        csp: PAGE_POLICY,
        frame: 'DENY',
        sniff: 'nosniff',
        referrer: 'same-origin',
      });
    }
  });

  it("the development identity provider's sign-in page: its inline style by hash, its form to the callback", async () => {
    const login = await fetch(`${api.url}/auth/login`, { redirect: 'manual' });
    const cookie = login.headers
      .getSetCookie()
      .map((c) => c.split(';')[0])
      .join('; ');
    let url = new URL(login.headers.get('location')!, api.url).href;
    let res = await fetch(url, { redirect: 'manual', headers: { cookie } });
    for (let hops = 0; res.status >= 300 && res.status < 400 && hops < 5; hops++) {
      const jar = [cookie, ...res.headers.getSetCookie().map((c) => c.split(';')[0])].join('; ');
      url = new URL(res.headers.get('location')!, url).href;
      res = await fetch(url, { redirect: 'manual', headers: { cookie: jar } });
    }
    expect(url).toMatch(/\/idp\/interaction\//);
    const html = await res.text();
    const style = /<style>([\s\S]*?)<\/style>/.exec(html)![1]!;
    const hash = `'sha256-${createHash('sha256').update(style).digest('base64')}'`;
    expect(framed(res)).toEqual({
      csp: PAGE_POLICY.replace("style-src 'self'", `style-src 'self' ${hash}`).replace(
        "form-action 'self'",
        `form-action 'self' ${new URL(api.url).origin} http://localhost:${api.port}`,
      ),
      frame: 'DENY',
      sniff: 'nosniff',
      referrer: 'same-origin',
    });
    // Its discovery document (JSON) carries them too; the API's own answers do not need them.
    expect(framed(await fetch(`${api.url}/idp/.well-known/openid-configuration`)).frame).toBe('DENY');
    expect(framed(await fetch(`${api.url}/api/nope`)).csp).toBeNull();
  });
});
