// Sign-up through an identity provider whose claims the API would refuse anywhere else: a NUL and
// control characters in the name (the sign-in was a 500, or the characters were stored as the
// account's name), a NUL in the subject. The development provider passes them through as given.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '@berth/test/support/api';
import { signIn } from '@berth/test/support/oidc';
import { sql } from '@berth/test/support/postgres';

let api: TestApi;
beforeAll(async () => {
  api = await startTestApi({ BERTH_DEV_IDP: 'true' });
});
afterAll(async () => api?.stop());

describe('claims the API would refuse', () => {
  it('a name with a NUL, newlines and a tab: signed up, the account named on one line', async () => {
    const { jar, landed } = await signIn(api.url, { subject: 'eve', name: 'Eve\u0000\r\nAdmin\troot' });
    expect(landed).toBe(`${api.url}/`);
    const session = (await (await jar.fetch(`${api.url}/auth/session`)).json()) as {
      account: { id: string; name: string };
      identity: { name: string };
    };
    expect(session.account.name).toBe('Eve Admin root');
    expect(session.identity.name).toBe('Eve Admin root');
    const [row] = await sql<{ name: string }>(api.db.url, 'SELECT name FROM accounts WHERE id = $1', [
      session.account.id,
    ]);
    expect(row!.name).toBe('Eve Admin root');
  });

  it('a name that is only control characters: the subject names the account', async () => {
    const { jar } = await signIn(api.url, { subject: 'mallory', name: '\u0000\u0007' });
    const session = (await (await jar.fetch(`${api.url}/auth/session`)).json()) as {
      account: { name: string };
    };
    expect(session.account.name).toBe('mallory');
  });

  it('a subject with a NUL: refused, saying why; no account is created', async () => {
    const before = await sql<{ n: number }>(api.db.url, 'SELECT count(*)::int AS n FROM accounts');
    const { landed } = await signIn(api.url, { subject: 'a\u0000b', name: 'Nul' });
    expect(decodeURIComponent(new URL(landed).searchParams.get('signin_error') ?? '')).toBe(
      "Sign-in failed: the identity provider's subject (sub) contains control characters",
    );
    expect(await sql<{ n: number }>(api.db.url, 'SELECT count(*)::int AS n FROM accounts')).toEqual(before);
  });
});
