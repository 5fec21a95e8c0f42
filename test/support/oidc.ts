// Signing in to the dashboard the way a browser does, without one: redirects followed by hand and a
// cookie jar per host. Also starts a second, separate OpenID Connect provider process.
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** Cookies by host (names only: paths and expiry do not matter to these short flows). */
export class CookieJar {
  private readonly jars = new Map<string, Map<string, string>>();

  header(url: string): string {
    const jar = this.jars.get(new URL(url).host);
    return jar ? [...jar].map(([k, v]) => `${k}=${v}`).join('; ') : '';
  }

  store(url: string, res: Response): void {
    const host = new URL(url).host;
    const jar = this.jars.get(host) ?? new Map<string, string>();
    this.jars.set(host, jar);
    for (const line of res.headers.getSetCookie()) {
      const [pair, ...attrs] = line.split(';');
      const eq = pair!.indexOf('=');
      const name = pair!.slice(0, eq).trim();
      const value = pair!.slice(eq + 1).trim();
      const expired = attrs.some((a) => /^\s*expires=Thu, 01 Jan 1970/i.test(a)) || value === '';
      if (expired) jar.delete(name);
      else jar.set(name, value);
    }
  }

  /** A fetch that sends and keeps this jar's cookies, never following redirects itself. */
  async fetch(url: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    const cookie = this.header(url);
    if (cookie) headers.set('cookie', cookie);
    const res = await fetch(url, { ...init, headers, redirect: 'manual' });
    this.store(url, res);
    return res;
  }
}

/**
 * Signs in through /auth/login and a Berth-style identity provider's page (the development one, or
 * the same code as a separate process): follows every redirect, submits the page's form.
 */
export async function signIn(
  apiUrl: string,
  user: { subject: string; name: string },
  jar = new CookieJar(),
): Promise<{ jar: CookieJar; landed: string }> {
  let url = `${apiUrl}/auth/login`;
  for (let hops = 0; hops < 20; hops++) {
    const res = await jar.fetch(url);
    if (res.status >= 300 && res.status < 400) {
      const next = new URL(res.headers.get('location')!, url).href;
      if (next.startsWith(apiUrl) && !next.includes('/auth/') && !next.includes('/idp/')) {
        await res.body?.cancel();
        return { jar, landed: next };
      }
      url = next;
      await res.body?.cancel();
      continue;
    }
    const html = await res.text();
    if (res.status !== 200) throw new Error(`sign-in: ${res.status} at ${url}: ${html.slice(0, 300)}`);
    const action = /<form method="post" action="([^"]+)"/.exec(html)?.[1];
    if (!action) throw new Error(`sign-in: no form at ${url}`);
    const post = await jar.fetch(new URL(action.replace(/&amp;/g, '&'), url).href, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(user).toString(),
    });
    if (post.status < 300 || post.status >= 400)
      throw new Error(`sign-in form: ${post.status} ${await post.text()}`);
    url = new URL(post.headers.get('location')!, url).href;
  }
  throw new Error('sign-in: too many redirects');
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

export interface OidcProviderProcess {
  issuer: string;
  clientId: string;
  clientSecret: string;
  stop(): Promise<void>;
}

/** A separately started OpenID Connect provider (oidc-provider) on its own port, in its own process. */
export async function startOidcProvider(redirectUris: string[]): Promise<OidcProviderProcess> {
  const port = await freePort();
  const issuer = `http://127.0.0.1:${port}/oidc`;
  const clientId = 'berth-test-client';
  const clientSecret = 'test-client-secret-0123456789';
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/support/oidc-provider-main.ts'], {
    cwd: root,
    env: {
      ...process.env,
      OIDC_PORT: String(port),
      OIDC_ISSUER: issuer,
      OIDC_CLIENT_ID: clientId,
      OIDC_CLIENT_SECRET: clientSecret,
      OIDC_REDIRECT_URIS: redirectUris.join(' '),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`OIDC provider did not start: ${output}`)), 90_000);
    const read = (d: Buffer) => {
      output += d;
      if (output.includes('listening')) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`OIDC provider exited (${code}): ${output}`));
    });
  });
  return {
    issuer,
    clientId,
    clientSecret,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}
