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
/** Every error the main page logs to its console (a failed load included), in order. */
const consoleErrors: string[] = [];

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
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(`${m.text()} (${m.location().url})`);
  });
  page.on('pageerror', (e) => consoleErrors.push(e.message));
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

/**
 * Whether the underscores of the secret on screen are drawn: the field's pixels change when they are
 * blanked. (At 1× the field's line box ended above them, and `svc_live_…` read `svc live …`.)
 */
async function underscoresDrawn(): Promise<boolean> {
  const field = page.getByTestId('secret-value');
  const swap = (from: string, to: string) =>
    page.evaluate(`(() => {
      const e = document.querySelector('[data-testid="secret-value"]');
      e.value = e.value.replaceAll(${JSON.stringify(from)}, ${JSON.stringify(to)});
    })()`);
  const shown = await field.screenshot();
  await swap('_', '\u00a0');
  const blanked = await field.screenshot();
  await swap('\u00a0', '_');
  return !shown.equals(blanked);
}

/** The values the playground's "Model or endpoint" offers. */
const playgroundChoices = () =>
  page.evaluate(
    `[...document.querySelectorAll('select option')].map((o) => o.value).filter(Boolean)`,
  ) as Promise<string[]>;

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
    expect(await underscoresDrawn()).toBe(true);
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

  it('no page so far logged an error (a 404 for /favicon.ico was one), and the tab has Berth’s icon', async () => {
    // The sign-in page, the provider's page, the signup and a reload, each loaded whole.
    expect(consoleErrors).toEqual([]);
    const icons = (await page.evaluate(
      `[...document.querySelectorAll('link[rel="icon"]')].map((l) => l.href)`,
    )) as string[];
    expect(icons.length).toBeGreaterThan(0);
    // Browsers ask for /favicon.ico on their own, on pages without an icon link too (the sign-in
    // provider's); the page's links are what this one shows.
    for (const url of [api.url + '/favicon.ico', ...icons]) {
      const res = await page.request.get(url);
      expect([url, res.status(), res.headers()['content-type']]).toEqual([
        url,
        200,
        expect.stringMatching(/^image\//),
      ]);
    }
  });

  it('Settings → Keys: creates a key shown once, then only its prefix; revokes it with the trash icon, after a confirmation', async () => {
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
    // The trash icon asks first, as Terminate does; Cancel leaves the key working.
    await row.getByRole('button', { name: 'Revoke key laptop' }).click();
    const confirm = page.getByRole('alertdialog', { name: 'Revoke key laptop?' });
    await confirm.waitFor();
    await accessible();
    await confirm.getByRole('button', { name: 'Cancel' }).click();
    await poll(() => confirm.count()).toBe(0);
    expect(await row.locator('td').nth(5).textContent()).toBe('active');
    expect(await models()).toBe(200);
    await row.getByRole('button', { name: 'Revoke key laptop' }).click();
    await confirm.getByRole('button', { name: 'Yes, revoke' }).click();
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
    // The cheapest GPU is the one offered first (an L4, not the H100 at the top of the catalog), by
    // the name people know it by.
    const hardware = page.getByLabel('Hardware');
    await poll(() => hardware.inputValue()).toBe('nvidia-l4-24gb|1');
    expect(await hardware.locator('option:checked').textContent()).toBe('1 × NVIDIA L4 24GB (24 GiB each)');
    expect(await hardware.locator('option').allTextContents()).toContain(
      '1 × NVIDIA H100 80GB (80 GiB each)',
    );
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
    // Hardware by its display name, here and in the list (not the id nvidia-l4-24gb).
    const fact = (name: string) => page.locator('dl.facts dt', { hasText: name }).locator('+ dd');
    await poll(() => fact('Hardware').textContent()).toBe('1 × NVIDIA L4 24GB');

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
    expect(await row.locator('td').nth(3).textContent()).toBe('1 × NVIDIA L4 24GB');
    await poll(() => row.locator('.status').textContent(), 90_000).toBe('SLEEPING');

    await nav('Playground').click();
    const option = page.getByLabel('Model or endpoint').locator(`option[value="d:${endpointId}"]`);
    await poll(() => option.textContent()).toBe('demo (org/small) — SLEEPING');
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
    // Awake now, and the choice says so without a reload (it sleeps again only after 15 s idle).
    await poll(() => option.textContent(), 10_000).toBe('demo (org/small) — ONLINE');
    // The endpoint's page keeps the wake's receipt: where it woke, and each stage to the first byte.
    await nav('Endpoints').click();
    await page.getByRole('link', { name: 'demo' }).click();
    const receipt = page.getByTestId('wake-receipt');
    await poll(() => receipt.textContent(), 30_000).toMatch(
      // (a stage of a second or more reads in seconds: "first byte 1.1 s" on a loaded machine)
      /^\d[\d.]* m?s on gpu-l4-[01] \(warm node\) — signal \d[\d.]* m?s · node .* · engine .* · first byte \d[\d.]* m?s$/,
    );
  });

  it('on a phone (390 × 844) no page is wider than the screen, forms fit, and Sign out is on screen', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    try {
      const pages: { path: string; heading: string; ready: () => Promise<unknown> }[] = [
        {
          path: '/endpoints',
          heading: 'Endpoints',
          ready: async () => {
            await page.getByRole('row', { name: new RegExp(endpointId) }).waitFor();
            await page.getByRole('button', { name: 'Create endpoint' }).click();
            await poll(() => page.getByLabel('Hardware').inputValue()).not.toBe('');
          },
        },
        { path: `/endpoints/${endpointId}`, heading: 'demo', ready: () => statusLabel().waitFor() },
        { path: '/playground', heading: 'Playground', ready: () => page.getByLabel('Message').waitFor() },
        {
          path: '/settings/keys',
          heading: 'Settings → Keys',
          ready: () => page.getByTestId('key-default').waitFor(),
        },
        {
          path: '/settings/billing',
          heading: 'Settings → Billing',
          ready: () => page.getByTestId('balance').waitFor(),
        },
        { path: '/tools', heading: 'Tools', ready: () => page.getByTestId('tool-olympus').waitFor() },
      ];
      for (const p of pages) {
        await page.goto(api.url + p.path);
        await page.getByRole('heading', { name: p.heading, level: 1 }).waitFor();
        await p.ready();
        // Wider content scrolls inside its own box (a table), never the page sideways.
        const overflow = (await page.evaluate(
          'document.documentElement.scrollWidth - document.documentElement.clientWidth',
        )) as number;
        expect({ page: p.path, overflow }).toEqual({ page: p.path, overflow: 0 });
        for (const form of await page.locator('form').all()) {
          const box = (await form.boundingBox())!;
          expect({ page: p.path, left: box.x >= 0, right: box.x + box.width <= 390 }).toEqual({
            page: p.path,
            left: true,
            right: true,
          });
        }
        const out = (await page.getByRole('button', { name: 'Sign out' }).boundingBox())!;
        const onScreen = out.x >= 0 && out.x + out.width <= 390 && out.y >= 0 && out.y + out.height <= 844;
        expect({ page: p.path, signOutOnScreen: onScreen }).toEqual({ page: p.path, signOutOnScreen: true });
      }
      await accessible();
      await screenshot('phone-tools');
    } finally {
      await page.setViewportSize({ width: 1366, height: 800 });
    }
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

  it('the playground offers the catalog’s chat models, not its embedding models', async () => {
    const catalog = (name: string, kind: 'chat' | 'embedding') =>
      api.admin(`/admin/models/${name}`, {
        method: 'PUT',
        body: JSON.stringify({
          kind,
          backends: [{ baseUrl: 'http://127.0.0.1:9/v1', model: name }],
          pricing: { inputPerMTok: '0.10', outputPerMTok: '0.30' },
        }),
      });
    expect((await catalog('tiny-chat', 'chat')).status).toBe(201);
    expect((await catalog('tiny-embed', 'embedding')).status).toBe(201);
    await nav('Playground').click();
    await poll(playgroundChoices).toContain('e:tiny-chat');
    expect(await playgroundChoices()).not.toContain('e:tiny-embed');
  });

  it('the playground offers `auto` (Olympus chooses) while Olympus is enabled for the account', async () => {
    /** Olympus on or off for the account, with the button of the Tools page. */
    const olympus = async (on: boolean) => {
      await nav('Tools').click();
      const row = page.getByTestId('tool-olympus');
      await poll(() => row.locator('td').nth(4).textContent()).toMatch(/^(en|dis)abled$/);
      const button = row.getByRole('button', { name: on ? 'Enable olympus' : 'Disable olympus' });
      if (await button.count()) await button.click();
      await poll(() => row.locator('td').nth(4).textContent()).toBe(on ? 'enabled' : 'disabled');
    };
    await olympus(true);
    await nav('Playground').click();
    await poll(playgroundChoices).toContain('e:auto');
    await page.getByLabel('Model or endpoint').selectOption('e:auto');
    await olympus(false);
    await nav('Playground').click();
    await poll(playgroundChoices).toContain(`d:${endpointId}`);
    expect(await playgroundChoices()).not.toContain('e:auto');
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
    await page
      .getByRole('alertdialog', { name: 'Revoke key default?' })
      .getByRole('button', { name: 'Yes, revoke' })
      .click();
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
