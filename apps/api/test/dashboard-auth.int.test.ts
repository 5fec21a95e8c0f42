// Dashboard sign-in and session mode, through the API as a browser uses it (no browser: redirects
// followed by hand, cookies in a jar): the development identity provider and a second, separately
// started OpenID Connect provider; signup; CSRF; sign-out on every replica.
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import {
  CookieJar,
  freePort,
  signIn,
  startOidcProvider,
  type OidcProviderProcess,
} from '@berth/test/support/oidc';
import { sql } from '@berth/test/support/postgres';

let api: TestApi;
let replica: TestApi;
beforeAll(async () => {
  api = await startTestApi({ BERTH_DEV_IDP: 'true' });
  replica = await startTestApi({ BERTH_DEV_IDP: 'true' }, api.db);
});
afterAll(async () => {
  await replica?.stop();
  await api?.stop();
});

interface SessionBody {
  signedIn: boolean;
  signIn: { available: boolean; development: boolean; label: string | null };
  account?: { id: string; name: string };
  identity?: { issuer: string; subject: string; name: string };
  csrfToken?: string;
  newKey?: { id: string; name: string; scope: string; prefix: string; value: string };
}

async function session(jar: CookieJar, url = api.url): Promise<SessionBody> {
  const res = await jar.fetch(`${url}/auth/session`);
  expect(res.status).toBe(200);
  return (await res.json()) as SessionBody;
}

describe('sign-in through the development identity provider', () => {
  it('the first sign-in is the signup: an account and its default inference key, shown once', async () => {
    const before = await session(new CookieJar());
    expect(before).toMatchObject({
      signedIn: false,
      signIn: { available: true, development: true, label: 'Development identity provider (local only)' },
    });

    const { jar, landed } = await signIn(api.url, { subject: 'ada', name: 'Ada Lovelace' });
    expect(landed).toBe(`${api.url}/`);
    const first = await session(jar);
    expect(first).toMatchObject({
      signedIn: true,
      account: { id: expect.stringMatching(/^acct_/), name: 'Ada Lovelace' },
      identity: { issuer: `${api.url}/idp`, subject: 'ada', name: 'Ada Lovelace' },
      csrfToken: expect.any(String),
      newKey: { name: 'default', scope: 'inference', value: expect.stringMatching(/^svc_live_/) },
    });
    // Shown once: the next answer has no value, and the database keeps only the hash.
    const second = await session(jar);
    expect(second.newKey).toBeUndefined();
    const rows = await sql(api.db.url, 'SELECT data::text FROM dashboard_sessions');
    expect(JSON.stringify(rows)).not.toContain(first.newKey!.value);

    // The key works as a Bearer key, and the session sees it in Settings → Keys.
    const models = await fetch(`${api.url}/api/models`, { headers: bearer(first.newKey!.value) });
    expect(models.status).toBe(200);
    const keys = await (await jar.fetch(`${api.url}/api/keys`)).json();
    expect(keys.data).toEqual([
      expect.objectContaining({ id: first.newKey!.id, prefix: first.newKey!.prefix, state: 'active' }),
    ]);

    // Signing in again (another browser) is the same account, and no new key.
    const again = await signIn(api.url, { subject: 'ada', name: 'Ada' });
    const s = await session(again.jar);
    expect(s.account!.id).toBe(first.account!.id);
    expect(s.newKey).toBeUndefined();
    const [{ count }] = (await sql(
      api.db.url,
      `SELECT count(*)::int AS count FROM api_keys WHERE account_id = '${first.account!.id}'`,
    )) as [{ count: number }];
    expect(count).toBe(1);
  });

  it('refuses state changes without the CSRF token, accepts them with it', async () => {
    const { jar } = await signIn(api.url, { subject: 'csrf-user', name: 'C' });
    const { csrfToken } = await session(jar);
    const body = JSON.stringify({ name: 'ci', scope: 'global' });
    const headers = { 'content-type': 'application/json' };

    const missing = await jar.fetch(`${api.url}/api/keys`, { method: 'POST', headers, body });
    expect(missing.status).toBe(403);
    expect(await missing.json()).toEqual({
      error:
        'Missing or invalid CSRF token: send the X-CSRF-Token header with the csrfToken of GET /auth/session',
      code: 'csrf_failed',
    });
    const wrong = await jar.fetch(`${api.url}/api/keys`, {
      method: 'POST',
      headers: { ...headers, 'x-csrf-token': csrfToken!.replace(/.$/, (c) => (c === 'a' ? 'b' : 'a')) },
      body,
    });
    expect(wrong.status).toBe(403);
    const keysBefore = (await (await jar.fetch(`${api.url}/api/keys`)).json()).data;
    expect(keysBefore).toHaveLength(1); // nothing was created

    const ok = await jar.fetch(`${api.url}/api/keys`, {
      method: 'POST',
      headers: { ...headers, 'x-csrf-token': csrfToken! },
      body,
    });
    expect(ok.status).toBe(201);
    expect(await ok.json()).toMatchObject({
      name: 'ci',
      scope: 'global',
      value: expect.stringMatching(/^svc_live_/),
    });

    const logout = await jar.fetch(`${api.url}/auth/logout`, { method: 'POST' });
    expect(logout.status).toBe(403);
    expect((await session(jar)).signedIn).toBe(true);
  });

  it('a Bearer header wins over the session; routes without session mode refuse it', async () => {
    const { jar } = await signIn(api.url, { subject: 'bearer-user', name: 'B' });
    const withBadKey = await jar.fetch(`${api.url}/api/keys`, {
      headers: bearer('svc_live_' + 'x'.repeat(33)),
    });
    expect(withBadKey.status).toBe(401);
    expect((await withBadKey.json()).error).toBe('Invalid API key');
    const admin = await jar.fetch(`${api.url}/admin/billing/reconciliation`);
    expect(admin.status).toBe(401);
  });

  it('sign-out deletes the session: every replica refuses its cookie at once', async () => {
    const { jar } = await signIn(api.url, { subject: 'leaver', name: 'L' });
    const { csrfToken } = await session(jar);
    // The other replica (same database) serves the same session.
    const onReplica = await fetch(`${replica.url}/api/keys`, { headers: { cookie: jar.header(api.url) } });
    expect(onReplica.status).toBe(200);
    const cookie = jar.header(api.url);

    const out = await jar.fetch(`${api.url}/auth/logout`, {
      method: 'POST',
      headers: { 'x-csrf-token': csrfToken! },
    });
    expect(out.status, await out.clone().text()).toBe(204);
    expect(out.headers.get('set-cookie')).toMatch(/berth_session=;/);
    const after = await fetch(`${replica.url}/api/keys`, { headers: { cookie } });
    expect(after.status).toBe(401);
    expect(await after.json()).toEqual({
      error: 'Missing or invalid Authorization header',
      code: 'missing_authorization',
    });
    const s = await fetch(`${replica.url}/auth/session`, { headers: { cookie } });
    expect(((await s.json()) as SessionBody).signedIn).toBe(false);
  });

  it('the session cookie is HttpOnly, SameSite=Lax, and Secure unless on plain http to localhost', async () => {
    const res = await fetch(`${api.url}/auth/login`, { redirect: 'manual' });
    expect(res.status).toBe(302);
    const cookie = res.headers.getSetCookie().find((c) => c.startsWith('berth_session='))!;
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Lax/);
    expect(cookie).not.toMatch(/Secure/); // http://127.0.0.1: the documented exception
    const proxied = await fetch(`${api.url}/auth/login`, {
      redirect: 'manual',
      headers: { 'x-forwarded-proto': 'https' },
    });
    expect(proxied.status).toBe(302); // TRUST_PROXY is off: the header is not believed
  });
});

describe('sign-in through a separately started OpenID Connect provider', () => {
  let idp: OidcProviderProcess;
  let other: TestApi;
  beforeAll(async () => {
    const port = await freePort();
    idp = await startOidcProvider([`http://127.0.0.1:${port}/auth/callback`]);
    other = await startTestApi({
      PORT: String(port),
      BERTH_OIDC_ISSUER: idp.issuer,
      BERTH_OIDC_CLIENT_ID: idp.clientId,
      BERTH_OIDC_CLIENT_SECRET: idp.clientSecret,
    });
  });
  afterAll(async () => {
    await other?.stop();
    await idp?.stop();
  });

  it('signs up through the configured issuer (no development provider then)', async () => {
    const anonymous = await session(new CookieJar(), other.url);
    expect(anonymous.signIn).toMatchObject({
      available: true,
      development: false,
      label: new URL(idp.issuer).host,
    });
    expect((await fetch(`${other.url}/idp/.well-known/openid-configuration`)).status).toBe(404);

    const { jar } = await signIn(other.url, { subject: 'grace', name: 'Grace Hopper' });
    const s = await session(jar, other.url);
    expect(s).toMatchObject({
      signedIn: true,
      account: { name: 'Grace Hopper' },
      identity: { issuer: idp.issuer, subject: 'grace' },
      newKey: { scope: 'inference' },
    });
  });

  it('a callback with a forged state signs nothing in', async () => {
    const jar = new CookieJar();
    const start = await jar.fetch(`${other.url}/auth/login`);
    expect(start.status).toBe(302);
    const res = await jar.fetch(
      `${other.url}/auth/callback?code=forged&state=forged&iss=${encodeURIComponent(idp.issuer)}`,
    );
    expect(res.status).toBe(303);
    expect(decodeURIComponent(res.headers.get('location')!)).toMatch(/^\/\?signin_error=Sign-in failed: /);
    expect((await session(jar, other.url)).signedIn).toBe(false);
  });
});

describe('sign-in configuration', () => {
  it('without an issuer and with PostgreSQL, sign-in says what to configure', async () => {
    const plain = await startTestApi({}, api.db);
    try {
      const res = await fetch(`${plain.url}/auth/login`, { redirect: 'manual' });
      expect(res.status).toBe(503);
      expect((await res.json()).error).toMatch(/^Sign-in is not configured: set BERTH_OIDC_ISSUER/);
    } finally {
      await plain.stop();
    }
  });
});

describe('session mode on inference routes (spec §5.3)', () => {
  let local: TestApi;
  beforeAll(async () => {
    const dataDir = await mkdtemp(path.join(tmpdir(), 'berth-session-'));
    local = await startTestApi(
      { BERTH_DEV_IDP: 'true', BERTH_RUNTIME: 'local', BERTH_DATA_DIR: dataDir },
      api.db,
    );
  });
  afterAll(async () => local?.stop());

  it('a session calls its own endpoint while the account has an active key; 403 at once after the last is revoked', async () => {
    const { jar } = await signIn(local.url, { subject: 'playground-user', name: 'P' });
    const { csrfToken, newKey } = await session(jar, local.url);
    const json = { 'content-type': 'application/json', 'x-csrf-token': csrfToken! };
    const created = await jar.fetch(`${local.url}/api/endpoints`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({
        model: 'Qwen/Qwen2.5-0.5B-Instruct',
        hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      }),
    });
    expect(created.status, await created.clone().text()).toBe(201);
    const { id } = (await created.json()) as { id: string };
    const chat = (headers: Record<string, string>) =>
      jar.fetch(`${local.url}/api/d/${id}/chat/completions`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
      });

    const noToken = await chat({ 'content-type': 'application/json' });
    expect(noToken.status).toBe(403);
    expect((await noToken.json()).error.code).toBe('csrf_failed');

    // With the default key active, the session's call goes through to the endpoint.
    let answered: Response | undefined;
    for (let i = 0; i < 60; i++) {
      answered = await chat(json);
      if (answered.status !== 503) break;
      await answered.body?.cancel();
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(answered!.status).toBe(200);
    expect((await answered!.json()).object).toBe('chat.completion');

    const revoked = await jar.fetch(`${local.url}/api/keys/${newKey!.id}`, {
      method: 'DELETE',
      headers: json,
    });
    expect(revoked.status).toBe(200);
    const refused = await chat(json);
    expect(refused.status).toBe(403);
    expect(await refused.json()).toEqual({
      error: {
        message: 'You must generate an API key first to use inference.',
        type: 'permission_error',
        code: 'no_inference_key',
        param: null,
      },
      message: 'You must generate an API key first to use inference.',
    });
    // Management still works for the session: it can make a new inference key, and inference is back.
    const again = await jar.fetch(`${local.url}/api/keys`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ name: 'playground', scope: 'inference' }),
    });
    expect(again.status).toBe(201);
    expect((await chat(json)).status).toBe(200);

    const gone = await jar.fetch(`${local.url}/api/endpoints/${id}`, { method: 'DELETE', headers: json });
    expect(gone.status).toBeLessThan(300);
  });
});
