// Settings → Keys in a real browser (Debian's Chromium driven by playwright-core), issue 32: a key
// created with a spend limit and an expiry shows both; its limits changed from the page; a rotation
// shows the new value once and the old key working until its grace period ends; Settings → Billing
// lists the keys' spend limits. Every state passes axe-core with no serious or critical violation.
import AxeBuilder from '@axe-core/playwright';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '../support/api.ts';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

let api: TestApi;
let browser: Browser;
let page: Page;
const errors: string[] = [];

beforeAll(async () => {
  api = await startTestApi({ BERTH_DEV_IDP: 'true' });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
  });
  page = await (await browser.newContext({ viewport: { width: 1366, height: 800 } })).newPage();
  page.setDefaultTimeout(15_000);
  page.on('pageerror', (e) => errors.push(e.message));
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await api?.stop();
});

async function accessible(): Promise<void> {
  const { violations } = await new AxeBuilder({ page }).analyze();
  const bad = violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`);
  expect(bad).toEqual([]);
}

const row = (name: string) => page.getByTestId(`key-${name}`);

describe('Settings → Keys: limits, expiry, rotation', () => {
  it('signs in and creates a key with a spend limit and an expiry', async () => {
    await page.goto(api.url + '/');
    await page.getByRole('link', { name: /Sign in with/ }).click();
    await page.getByLabel('User id').fill('keys');
    await page.getByLabel('Display name').fill('Key Keeper');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('navigation').getByRole('link', { name: 'Settings → Keys' }).click();
    await page.getByRole('heading', { level: 1, name: 'Settings → Keys' }).waitFor();
    await page.getByLabel('Name').fill('capped');
    await page.getByLabel('Expires (your time zone; empty: never)').fill('2099-01-01T12:00');
    await page.getByLabel('Spend limit (empty: none)').fill('2.50');
    await page.getByLabel('per').selectOption('week');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByRole('heading', { name: 'Key “capped” created' }).waitFor();
    await page.getByRole('button', { name: 'Done' }).click();
    await expect.poll(() => page.getByTestId('key-capped-limit').textContent()).toBe('0.00 of 2.50 / week');
    expect(await page.getByTestId('key-capped-state').textContent()).toMatch(
      /^active — expires 1\/1\/2099, 12:00/,
    );
    await accessible();
  });

  it('changes its limits from the page', async () => {
    await page.getByRole('button', { name: 'Limits of key capped' }).click();
    await page.getByRole('heading', { name: 'Limits of key “capped”' }).waitFor();
    const form = page.locator('form', { has: page.getByRole('heading', { name: 'Limits of key “capped”' }) });
    await form.getByLabel('Spend limit (empty: none)').fill('5.00');
    await form.getByLabel('per').selectOption('day');
    await form.getByLabel('Allow fallbacks to catalog models priced above the one asked for').check();
    await accessible();
    await form.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => page.getByTestId('key-capped-limit').textContent()).toBe('0.00 of 5.00 / day');
  });

  it('rotates it: the new value once, the old key working until its grace period ends', async () => {
    await page.getByRole('button', { name: 'Rotate key capped' }).click();
    const dialog = page.getByRole('alertdialog', { name: 'Rotate key capped?' });
    await dialog.getByLabel('Grace period').selectOption('3600');
    await accessible();
    await dialog.getByRole('button', { name: 'Rotate' }).click();
    await page.getByRole('heading', { name: 'Key “capped” rotated' }).waitFor();
    expect(await page.getByText(/keeps working until/).textContent()).toMatch(/keeps working until \S/);
    await page.getByRole('button', { name: 'Done' }).click();
    // Two rows named "capped": the new one (active) and the old one (rotated, working for an hour).
    await expect.poll(() => row('capped').count()).toBe(2);
    const states = await page.getByTestId('key-capped-state').allTextContents();
    expect(states.some((s) => /^rotated — works until /.test(s))).toBe(true);
    expect(states.some((s) => /^active/.test(s))).toBe(true);
    await accessible();
  });

  it('Settings → Billing lists the keys’ spend limits', async () => {
    await page.getByRole('navigation').getByRole('link', { name: 'Settings → Billing' }).click();
    await page.getByRole('heading', { name: 'Spend limits of your keys' }).waitFor();
    const rows = await page.getByTestId('limit-capped').allTextContents();
    expect(rows.length).toBe(2);
    for (const r of rows) expect(r).toContain('5.000000 / day');
    await accessible();
    expect(errors).toEqual([]);
  });
});
