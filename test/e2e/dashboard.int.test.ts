// The dashboard in a real browser (Debian's Chromium driven by playwright-core; no browser download),
// against the real API on the shared Kubernetes control plane, signed in through the real identity
// providers as a user would: the development one inside the API, and a second, separately started
// OpenID Connect provider configured as the issuer of a second API replica. The steps run in order,
// as one user's day: signup, keys, an endpoint from PROVISIONING to ONLINE on its detail page, logs,
// the playground (streaming, then waking a sleeping endpoint), billing, tools, terminate, sign-out; and
// an account of the other provider that cannot see the first one's endpoints. Every page passes an
// axe-core check with no serious or critical violations. `SCREENSHOTS=1` refreshes docs/screenshots.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import AxeBuilder from '@axe-core/playwright';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '../support/api.ts';
import { eventually } from '../support/eventually.ts';
import { freePort, startOidcProvider, type OidcProviderProcess } from '../support/oidc.ts';
import { kubeconfigPath } from '../cluster/env.ts';
import { api, ns, useDedicatedEndpoints } from './dedicated/fixture.ts';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SCREENSHOTS = process.env.SCREENSHOTS === '1';
const shots = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../docs/screenshots');

useDedicatedEndpoints({ BERTH_DEV_IDP: 'true' });

let browser: Browser;
let context: BrowserContext;
let page: Page;
let idp: OidcProviderProcess;
let second: TestApi;

beforeAll(async () => {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    // playwright-core gives every launch a fresh --user-data-dir of its own.
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
  context = await browser.newContext({ viewport: { width: 1366, height: 800 } });
  page = await context.newPage();
  page.setDefaultTimeout(15_000);
  // The second provider, and a second API replica (same database, same cluster) whose issuer it is.
  const port = await freePort();
  idp = await startOidcProvider([`http://127.0.0.1:${port}/auth/callback`]);
  second = await startTestApi(
    {
      PORT: String(port),
      KUBECONFIG: kubeconfigPath(),
      BERTH_NAMESPACE: ns.name,
      BERTH_OIDC_ISSUER: idp.issuer,
      BERTH_OIDC_CLIENT_ID: idp.clientId,
      BERTH_OIDC_CLIENT_SECRET: idp.clientSecret,
    },
    api.db,
  );
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await second?.stop();
  await idp?.stop();
});

/** axe-core on the page as it is now: no serious or critical violations. */
async function accessible(p: Page = page): Promise<void> {
  const { violations } = await new AxeBuilder({ page: p }).analyze();
  const bad = violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`);
  expect(bad).toEqual([]);
}

async function screenshot(name: string, p: Page = page): Promise<void> {
  if (SCREENSHOTS) await p.screenshot({ path: path.join(shots, `${name}.png`) });
}

/** The identity provider's page: what a user types there. */
async function signInAt(p: Page, user: { subject: string; name: string }): Promise<void> {
  await p.getByLabel('User id').fill(user.subject);
  await p.getByLabel('Display name').fill(user.name);
  await p.getByRole('button', { name: 'Sign in' }).click();
}

/** Polls until the matcher that follows passes (vitest's default gives up after one second). */
const poll = <T>(fn: () => Promise<T> | T, timeout = 15_000) => expect.poll(fn, { timeout, interval: 100 });

/** Records in the page every text its elements matching `selector` show from now on (SPA navigation included). */
async function recordTexts(selector: string): Promise<() => Promise<string[]>> {
  // (A script in the page's own words: this file is compiled without the DOM's types.)
  await page.evaluate(`
    window.seen = [];
    new MutationObserver(() => {
      for (const el of document.querySelectorAll(${JSON.stringify(selector)})) window.seen.push(el.textContent);
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  `);
  return async () => (await page.evaluate('window.seen')) as string[];
}

const nav = (name: string) => page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name });
const statusLabel = (p: Page = page) => p.locator('dl.facts .status');

let endpointId = '';

describe('the dashboard, in Chromium, as one user', () => {
  it('signs in through the development identity provider; the signup shows the default key once', async () => {
    await page.goto(api.url + '/');
    await poll(() => page.getByRole('heading', { name: 'Sign in to Berth' }).isVisible()).toBe(true);
    await accessible();
    await screenshot('sign-in');
    await page.getByRole('link', { name: /^Sign in with Development identity provider/ }).click();
    await page.waitForURL(/\/idp\//);
    await signInAt(page, { subject: 'ada', name: 'Ada Lovelace' });
    await page.waitForURL(`${api.url}/endpoints`);

    const notice = page.getByRole('region', { name: 'Welcome to Berth: your API key' });
    const value = await notice.getByLabel('Your new API key').inputValue();
    expect(value).toMatch(/^svc_live_/);
    await poll(() => page.getByText('Signed in as').textContent()).toContain('Ada Lovelace');
    await accessible();
    await screenshot('signup-key');
    await notice.getByRole('button', { name: 'I have copied it' }).click();
    // Shown once: a reload does not bring it back.
    await page.reload();
    await page.getByRole('heading', { name: 'Endpoints', level: 1 }).waitFor();
    expect(await page.getByText(value).count()).toBe(0);
    expect(await page.locator('[data-testid="secret-value"]').count()).toBe(0);
  });

  it('Settings → Keys: creates a key shown once, then only its prefix; revokes it with the trash icon', async () => {
    await nav('Settings → Keys').click();
    await page.getByRole('heading', { name: 'Settings → Keys' }).waitFor();
    await page.getByLabel('Name', { exact: true }).fill('laptop');
    await page.getByLabel('Scope').selectOption('global');
    await page.getByRole('button', { name: 'Create key' }).click();
    const value = await page.getByLabel('Value of laptop').inputValue();
    expect(value).toMatch(/^svc_live_/);
    const row = page.getByTestId('key-laptop');
    await poll(() => row.textContent()).toContain('global');
    await accessible();
    await screenshot('keys');
    await page.getByRole('button', { name: 'Done' }).click();
    await page.reload();
    await row.waitFor();
    expect(await page.getByText(value).count()).toBe(0);
    const shown = (await row.locator('code').textContent())!;
    expect(shown).toMatch(/^svc_live_\w+…$/);
    expect(value.startsWith(shown.slice(0, -1)) && shown.length < value.length).toBe(true);

    // The key works until it is revoked, and not a moment after.
    const models = () =>
      fetch(api.url + '/api/models', { headers: { authorization: `Bearer ${value}` } }).then((r) => r.status);
    expect(await models()).toBe(200);
    await row.getByRole('button', { name: 'Revoke key laptop' }).click();
    await poll(() => row.textContent()).toContain('revoked');
    expect(await models()).toBe(401);
  });

  it('CSRF: a state-changing call with the session but without X-CSRF-Token is refused', async () => {
    const res = await page.request.post(api.url + '/api/keys', {
      data: { name: 'forged', scope: 'global' },
    });
    expect(res.status()).toBe(403);
    expect(await res.json()).toEqual({
      error:
        'Missing or invalid CSRF token: send the X-CSRF-Token header with the csrfToken of GET /auth/session',
      code: 'csrf_failed',
    });
    await page.reload();
    expect(await page.getByTestId('key-forged').count()).toBe(0);
  });

  it('creates an endpoint and watches it go PROVISIONING → ONLINE live on its detail page, logs streaming', async () => {
    await nav('Endpoints').click();
    await page.getByRole('button', { name: 'Create endpoint' }).click();
    await page.getByLabel('Name (optional)').fill('demo');
    await page.getByLabel('Model (model hub id)').fill('org/small');
    await page.getByLabel('Hardware').selectOption('nvidia-h100-80gb|1');
    await page.getByLabel('Idle timeout (seconds)').fill('15');
    // Every label the detail page shows, from its first render on, without a reload.
    const labels = await recordTexts('dl.facts .status');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    await page.waitForURL(/\/endpoints\/endpt-/);
    endpointId = new URL(page.url()).pathname.split('/').pop()!;
    await statusLabel().waitFor();
    if ((await statusLabel().textContent()) === 'PROVISIONING') {
      await accessible();
      await screenshot('endpoint-provisioning');
    }
    await poll(() => statusLabel().textContent(), 60_000).toBe('ONLINE');
    const shown = [...new Set(await labels())];
    expect(shown).toEqual(['PROVISIONING', 'ONLINE']);
    await poll(() => page.getByRole('progressbar').count()).toBe(0);

    const logs = page.getByRole('log', { name: 'Endpoint logs, streaming' });
    await poll(() => logs.textContent()).toContain(`# endpoint ${endpointId}`);
    await poll(() => logs.textContent(), 30_000).toMatch(/phase: up|Ready|Online/i);
  });

  it('the playground streams an answer from the endpoint', async () => {
    await nav('Playground').click();
    await page.getByLabel('Model or endpoint').selectOption(`d:${endpointId}`);
    const streamed = page.waitForResponse((r) => r.url().endsWith(`/api/d/${endpointId}/chat/completions`));
    await page.getByLabel('Message').fill('Hello!');
    await page.getByRole('button', { name: 'Send' }).click();
    const res = await streamed;
    expect(res.status()).toBe(200);
    expect(res.headers()['content-type']).toMatch(/^text\/event-stream/);
    // Token by token: several chunks on the wire, then [DONE].
    const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: '));
    expect(events.length).toBeGreaterThan(2);
    expect(events.at(-1)).toBe('data: [DONE]');
    const answer = page.getByTestId('message-assistant').last();
    await poll(() => page.getByRole('button', { name: 'Send' }).isVisible(), 30_000).toBe(true);
    expect(((await answer.textContent()) ?? '').replace(/^Model:\s*/, '').length).toBeGreaterThan(0);
    await accessible();
    await screenshot('playground');
  });

  it('an endpoint that went to sleep: the playground shows WAKING UP, then the answer', async () => {
    // It sleeps after 15 s without traffic; the list shows it live.
    await nav('Endpoints').click();
    const row = page.getByRole('row', { name: new RegExp(endpointId) });
    await poll(() => row.locator('.status').textContent(), 90_000).toBe('SLEEPING');

    await nav('Playground').click();
    await page.getByLabel('Model or endpoint').selectOption(`d:${endpointId}`);
    // Everything the page shows as status while answering, recorded as it happens.
    const seen = await recordTexts('[role="status"]');
    await page.getByLabel('Message').fill('Awake?');
    await page.getByRole('button', { name: 'Send' }).click();
    await poll(() => page.getByRole('button', { name: 'Send' }).isVisible(), 90_000).toBe(true);
    expect((await seen()).some((s) => s.includes('WAKING UP'))).toBe(true);
    const answer = await page.getByTestId('message-assistant').last().textContent();
    expect((answer ?? '').replace(/^Model:\s*/, '').length).toBeGreaterThan(0);
    expect(await page.getByRole('alert').allTextContents()).toEqual([]);
  });

  it('Settings → Billing shows the balance, free queries, ledger, usage and invoices', async () => {
    await nav('Settings → Billing').click();
    await poll(() => page.getByTestId('balance').textContent()).toMatch(/^-?\d+(\.\d+)? [A-Z]{3}$/);
    for (const name of ['Ledger', 'Usage per model', 'Weekly invoices (dedicated GPU time)'])
      await page.getByRole('heading', { name }).waitFor();
    expect(await page.getByText('Free queries left').count()).toBe(1);
    expect(await page.getByRole('alert').allTextContents()).toEqual([]);
    await accessible();
    await screenshot('billing');
  });

  it('Tools lists the managed tools and enables or disables one', async () => {
    await nav('Tools').click();
    await page.getByRole('heading', { name: 'Tools', level: 1 }).waitFor();
    const rows = page.locator('tbody tr');
    await poll(() => page.locator('main').textContent()).toMatch(/enabled|disabled|No managed tools/);
    expect(await page.getByRole('alert').allTextContents()).toEqual([]);
    await accessible();
    await screenshot('tools');
    if ((await rows.count()) === 0) return;
    const first = rows.first();
    const was = await first.locator('td').nth(4).textContent();
    await first.getByRole('button').click();
    await poll(() => first.locator('td').nth(4).textContent()).toBe(
      was === 'enabled' ? 'disabled' : 'enabled',
    );
  });

  it('an account of the second identity provider signs in and cannot see the first one’s endpoints', async () => {
    const other = await browser.newContext({ viewport: { width: 1366, height: 800 } });
    try {
      const p = await other.newPage();
      p.setDefaultTimeout(15_000);
      await p.goto(second.url + '/');
      await p.getByRole('link', { name: /^Sign in with/ }).click();
      await p.waitForURL((u) => u.href.startsWith(idp.issuer));
      await poll(() => p.getByRole('heading', { level: 1 }).textContent()).toBe(
        'Test identity provider (separate process)',
      );
      await signInAt(p, { subject: 'grace', name: 'Grace Hopper' });
      await p.waitForURL(`${second.url}/endpoints`);
      await p.getByRole('region', { name: 'Welcome to Berth: your API key' }).waitFor();
      await poll(() => p.getByText('Signed in as').textContent()).toContain('Grace Hopper');
      expect(await p.getByText('development sign-in').count()).toBe(0);
      await p.getByText('No endpoints yet.').waitFor();
      // Not even by its address: the detail page shows the API's refusal (spec §7: 403).
      await p.goto(`${second.url}/endpoints/${endpointId}`);
      await poll(() => p.getByRole('alert').textContent()).toContain(
        'Unauthorized access to dedicated endpoint',
      );
      expect(await p.getByText('org/small').count()).toBe(0);
      // The API says the same to this account's session.
      const res = await p.request.get(`${second.url}/api/endpoints/${endpointId}`);
      expect(res.status()).toBe(403);
      expect(await res.json()).toEqual({
        error: 'Unauthorized access to dedicated endpoint',
        code: 'endpoint_not_owned',
      });
    } finally {
      await other.close();
    }
  });

  it('with no active inference key the playground shows the 403 message', async () => {
    await nav('Settings → Keys').click();
    await page.getByRole('button', { name: 'Revoke key default' }).click();
    await poll(() => page.getByTestId('key-default').textContent()).toContain('revoked');
    await nav('Playground').click();
    await page.getByLabel('Model or endpoint').selectOption(`d:${endpointId}`);
    await page.getByLabel('Message').fill('Still there?');
    await page.getByRole('button', { name: 'Send' }).click();
    await poll(() => page.getByRole('alert').textContent()).toBe(
      'You must generate an API key first to use inference.',
    );
  });

  it('terminates the endpoint after a confirmation', async () => {
    await page.goto(`${api.url}/endpoints/${endpointId}`);
    await page.getByRole('button', { name: 'Terminate' }).click();
    const dialog = page.getByRole('alertdialog', { name: 'Terminate demo?' });
    await dialog.getByRole('button', { name: 'Yes, terminate' }).click();
    await page.getByRole('heading', { name: 'Endpoint terminated' }).waitFor();
    await eventually(
      async () => {
        const list = await page.request.get(api.url + '/api/endpoints');
        expect(((await list.json()) as { data: { id: string }[] }).data.map((e) => e.id)).not.toContain(
          endpointId,
        );
      },
      { timeout: 30_000 },
    );
  });

  it('signs out: the session ends, the API no longer knows it', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in to Berth' }).waitFor();
    const s = await page.request.get(api.url + '/auth/session');
    expect((await s.json()).signedIn).toBe(false);
    expect((await page.request.get(api.url + '/api/keys')).status()).toBe(401);
  });
});
