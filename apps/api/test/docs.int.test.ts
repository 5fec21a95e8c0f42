// GET /docs: the API reference rendered from GET /openapi.json by Swagger UI on our own origin. The
// page is loaded in Chromium (Debian's, as the dashboard's browser tests do) and must show the
// document's operations; every request the page makes stays on the API's origin.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser } from 'playwright-core';
import { startTestApi, type TestApi } from '@berth/test/support/api';

let api: TestApi;
let browser: Browser;
beforeAll(async () => {
  api = await startTestApi();
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
});
afterAll(async () => {
  await browser?.close();
  await api?.stop();
});

describe('GET /docs', () => {
  it('serves the page and the renderer from the same origin', async () => {
    for (const p of ['/docs', '/docs/']) {
      const res = await fetch(api.url + p);
      expect(res.status, p).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/html/);
      const html = await res.text();
      expect(html).toContain('<script src="/docs/swagger-ui-bundle.js"></script>');
      expect(html).not.toMatch(/https?:\/\//);
    }
    const bundle = await fetch(`${api.url}/docs/swagger-ui-bundle.js`);
    expect(bundle.status).toBe(200);
    expect(bundle.headers.get('content-type')).toMatch(/javascript/);
    const init = await (await fetch(`${api.url}/docs/init.js`)).text();
    expect(init).toContain("url: '/openapi.json'");
    const missing = await fetch(`${api.url}/docs/nope.js`);
    expect(missing.status).toBe(404);
  });

  it('renders the operations of /openapi.json in a browser, without leaving the origin', async () => {
    const page = await browser.newPage();
    const origins = new Set<string>();
    page.on('request', (r) => origins.add(new URL(r.url()).origin));
    await page.goto(`${api.url}/docs`);
    await page.getByRole('heading', { name: /Berth/ }).first().waitFor({ timeout: 20_000 });
    const doc = (await (await fetch(`${api.url}/openapi.json`)).json()) as { paths: Record<string, unknown> };
    expect(Object.keys(doc.paths)).toContain('/api/keys');
    // Swagger UI shows each operation's path; the keys route among them.
    await page.locator('[data-path="/api/keys"]').first().waitFor({ timeout: 20_000 });
    expect(await page.locator('.opblock').count()).toBeGreaterThanOrEqual(Object.keys(doc.paths).length);
    expect([...origins]).toEqual([api.url]);
    await page.close();
  });
});
