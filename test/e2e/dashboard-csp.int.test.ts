// The dashboard's Content-Security-Policy and frame protection in a real browser (Debian's Chromium
// driven by playwright-core): signed in through the development identity provider, whose page keeps
// its style and whose form reaches the callback under the policy; every page of the dashboard without
// one violation logged; and a page of another origin that frames the dashboard gets nothing.
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '../support/api.ts';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

let api: TestApi;
let browser: Browser;
let page: Page;
let framing: Server;
let dataDir: string;
/** Every error the pages log (a refused load or a policy violation included), in order. */
const errors: string[] = [];

beforeAll(async () => {
  // Local mode: the endpoints' pages have endpoints to list (none run here).
  dataDir = await mkdtemp(path.join(tmpdir(), 'berth-csp-'));
  api = await startTestApi({ BERTH_DEV_IDP: 'true', BERTH_RUNTIME: 'local', BERTH_DATA_DIR: dataDir });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
  });
  page = await (await browser.newContext()).newPage();
  page.setDefaultTimeout(15_000);
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`${m.text()} (${m.location().url})`);
  });
  page.on('pageerror', (e) => errors.push(e.message));
  // Another origin (another port) whose page frames the dashboard.
  framing = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(`<!doctype html><title>framing</title><iframe src="${api.url}/settings/keys"></iframe>`);
  });
  await new Promise<void>((resolve) => framing.listen(0, '127.0.0.1', resolve));
}, 60_000);

afterAll(async () => {
  await browser?.close();
  framing?.close();
  await api?.stop();
  await rm(dataDir, { recursive: true, force: true });
});

describe('the dashboard under its Content-Security-Policy', () => {
  it('sign-in through the development provider: its page styled, its form through to the dashboard', async () => {
    await page.goto(api.url + '/');
    await page.getByRole('link', { name: /Sign in with/ }).click();
    await page.getByLabel('User id').waitFor();
    expect(new URL(page.url()).pathname).toMatch(/^\/idp\/interaction\//);
    // The inline <style> applied (allowed by its hash): the button is the provider's blue.
    const button = page.getByRole('button', { name: 'Sign in' });
    // (A script in the page's own words: this file is compiled without the DOM's types.)
    const color = await page.evaluate(`getComputedStyle(document.querySelector('button')).backgroundColor`);
    expect(color).toBe('rgb(11, 92, 173)');
    await page.getByLabel('User id').fill('csp');
    await page.getByLabel('Display name').fill('Content Policy');
    await button.click();
    await page.getByText('Signed in as').waitFor();
    expect(new URL(page.url()).origin).toBe(new URL(api.url).origin);
  });

  it('every page of the dashboard loads and works without a violation', async () => {
    for (const [link, heading] of [
      ['Settings → Keys', 'Settings → Keys'],
      ['Settings → Billing', 'Settings → Billing'],
      ['Tools', 'Tools'],
      ['Playground', 'Playground'],
      ['Endpoints', 'Endpoints'],
    ]) {
      await page.getByRole('navigation').getByRole('link', { name: link }).click();
      await page.getByRole('heading', { level: 1, name: heading }).waitFor();
    }
    // A state change through the page's own fetch (connect-src 'self'): a key created.
    await page.getByRole('navigation').getByRole('link', { name: 'Settings → Keys' }).click();
    await page.getByLabel('Name').fill('from-the-browser');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByText('Key “from-the-browser” created').waitFor();
    expect(errors).toEqual([]);
  });

  it('framed by a page of another origin: the browser refuses to show it', async () => {
    const framer = `http://127.0.0.1:${(framing.address() as AddressInfo).port}/`;
    await page.goto(framer);
    await expect
      .poll(() => errors.some((e) => e.includes("frame-ancestors 'none'")), { timeout: 10_000 })
      .toBe(true);
    const child = page.frames().find((f) => f !== page.mainFrame());
    expect(child?.url()).not.toBe(`${api.url}/settings/keys`);
  });
});
