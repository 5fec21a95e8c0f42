// An OpenID Connect provider (oidc-provider, a certified implementation) for local use: `npm start`
// with no BERTH_OIDC_ISSUER signs a local user in through it, so the dashboard works with one
// command. It is labelled as what it is on its page: anyone who reaches it can sign in as anyone.
// The tests also run it as a separate process, as a second, independently started provider.
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import express, { type Router } from 'express';
import Provider from 'oidc-provider';
import { pageHeaders } from '../../http/middleware.ts';

export interface DevIdpOptions {
  /** The issuer URL, including the path the provider is mounted at (e.g. http://localhost:8080/idp). */
  issuer: string;
  clientId: string;
  clientSecret: string;
  redirectUris: string[];
  /** The heading of its sign-in page. */
  label: string;
  proxy?: boolean;
}

const escape = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

/** The provider as an Express router, to be mounted at the issuer's path. */
export function devIdentityProvider(o: DevIdpOptions): Router {
  const names = new Map<string, string>();
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const mount = new URL(o.issuer).pathname.replace(/\/$/, '');
  const provider = new Provider(o.issuer, {
    clients: [
      {
        client_id: o.clientId,
        client_secret: o.clientSecret,
        redirect_uris: o.redirectUris,
        response_types: ['code'],
        grant_types: ['authorization_code'],
        token_endpoint_auth_method: 'client_secret_post',
      },
    ],
    jwks: { keys: [{ ...privateKey.export({ format: 'jwk' }), kid: 'dev', use: 'sig', alg: 'RS256' }] },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    claims: { openid: ['sub'], profile: ['name'] },
    // The name in the ID token itself: the client reads no userinfo.
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (_ctx: unknown, i: { uid: string }) => `${mount}/interaction/${i.uid}` },
    findAccount: (_ctx: unknown, id: string) => ({
      accountId: id,
      claims: () => ({ sub: id, name: names.get(id) ?? id }),
    }),
    // A first-party client: no consent screen.
    async loadExistingGrant(ctx: { oidc: { client: { clientId: string }; session: { accountId: string } } }) {
      const grant = new provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope('openid profile');
      await grant.save();
      return grant;
    },
  });
  provider.proxy = o.proxy ?? false;

  const router = express.Router();
  // Its pages as the dashboard's: same origin, never framed; its one inline <style> by its hash; the
  // sign-in form redirects on to the client's redirect URIs (Chromium checks form-action on them).
  router.use(
    pageHeaders({
      styles: [`'sha256-${createHash('sha256').update(STYLE).digest('base64')}'`],
      formAction: [...new Set(o.redirectUris.map((u) => new URL(u).origin))],
    }),
  );
  router.get('/interaction/:uid', async (req, res) => {
    const details = await provider.interactionDetails(req, res);
    res.type('html').send(page(o.label, `${mount}/interaction/${details.uid}/login`));
  });
  router.post(
    '/interaction/:uid/login',
    express.urlencoded({ extended: false, limit: '4kb' }),
    async (req, res) => {
      const body = req.body as { subject?: string; name?: string };
      const subject = (body.subject ?? '').trim().slice(0, 64) || 'developer';
      names.set(subject, (body.name ?? '').trim().slice(0, 100) || subject);
      await provider.interactionFinished(
        req,
        res,
        { login: { accountId: subject } },
        { mergeWithLastSubmission: false },
      );
    },
  );
  const handler = provider.callback();
  router.use((req, res) => handler(req, res));
  return router;
}

const STYLE = `
body{font-family:system-ui,sans-serif;background:#f4f5f7;color:#1b1f24;margin:0;display:flex;justify-content:center;padding:48px 16px}
main{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:24px 28px;max-width:420px;width:100%}
.warn{background:#fff4d6;border:1px solid #b58400;color:#4d3800;border-radius:6px;padding:10px 12px;font-size:14px}
label{display:block;margin-top:14px;font-weight:600}
input{width:100%;box-sizing:border-box;padding:8px;margin-top:4px;border:1px solid #57606a;border-radius:4px;font-size:15px}
button{margin-top:20px;width:100%;padding:10px;border:0;border-radius:6px;background:#0b5cad;color:#fff;font-size:15px;font-weight:600;cursor:pointer}
button:focus-visible,input:focus-visible{outline:3px solid #0b5cad;outline-offset:2px}
`;

function page(label: string, action: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escape(label)}</title>
<style>${STYLE}</style></head>
<body><main>
<h1>${escape(label)}</h1>
<p class="warn" role="note"><strong>Development only.</strong> This identity provider runs inside Berth for local use: it asks for no password, so anyone who can reach it can sign in as any user. Set <code>BERTH_OIDC_ISSUER</code> to use a real identity provider.</p>
<form method="post" action="${escape(action)}">
<label for="subject">User id</label><input id="subject" name="subject" value="developer" autocomplete="username" required>
<label for="name">Display name</label><input id="name" name="name" value="Local developer" autocomplete="name">
<button type="submit">Sign in</button>
</form>
</main></body></html>`;
}
