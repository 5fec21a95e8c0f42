// /auth: the dashboard's sign-in (OpenID Connect, authorization code + PKCE), its session and
// sign-out. The first sign-in of a subject is the signup: it creates the account and its default
// `inference` key, whose value GET /auth/session shows once.
import type { Request, Response } from 'express';
import { z } from 'zod';
import { newCsrfToken } from './sessions.ts';
import { csrfValid, SESSION_COOKIE } from '../../http/session.ts';
import type { SignInProvider } from './oidc.ts';
import { isLoopbackHost } from '../../platform/config.ts';
import { ApiError } from '../../platform/errors.ts';
import type { Routes } from '../../http/routes.ts';
import type { KeyService } from '../keys/service.ts';
import type { Logger } from '../../platform/logger.ts';
import { simpleError } from '../../http/openapi.ts';

export interface AuthRouteDeps {
  keys: KeyService;
  /** The sign-in provider; undefined when none is configured (or the development one is not up yet). */
  signIn(): SignInProvider | undefined;
  publicUrl?: string;
  logger: Logger;
}

const sessionView = z.object({
  signedIn: z.boolean(),
  signIn: z
    .object({
      available: z.boolean(),
      label: z.string().nullable(),
      development: z.boolean(),
      url: z.string(),
    })
    .describe('How to sign in'),
  account: z.object({ id: z.string(), name: z.string() }).optional(),
  identity: z.object({ issuer: z.string(), subject: z.string(), name: z.string() }).optional(),
  csrfToken: z.string().optional().describe('Send as X-CSRF-Token on every call that changes state'),
  newKey: z
    .object({ id: z.string(), name: z.string(), scope: z.string(), prefix: z.string(), value: z.string() })
    .optional()
    .describe('The default key created at signup: in the first answer after it only'),
});

/** Where the browser comes back to: this server's /auth/callback, as the browser reached it. */
function callbackUrl(req: Request, publicUrl?: string): string {
  const base = publicUrl ?? `${req.protocol}://${req.get('host')}`;
  return new URL('/auth/callback', base).href;
}

/** A path on this origin, never another site (`//evil.example`, `/\evil`). */
function safeReturn(value: unknown): string {
  return typeof value === 'string' && /^\/(?![/\\])/.test(value) ? value : '/';
}

/** Written before the redirect goes out: the browser's next request may reach another replica. */
function saved(req: Request): Promise<void> {
  return new Promise((resolve, reject) => req.session.save((err) => (err ? reject(err) : resolve())));
}

function fail(res: Response, message: string): void {
  res.redirect(303, `/?signin_error=${encodeURIComponent(message)}`);
}

export function registerAuthRoutes(routes: Routes, deps: AuthRouteDeps): void {
  routes.add(
    {
      method: 'get',
      path: '/auth/login',
      tag: 'dashboard',
      auth: 'none',
      summary: 'Start signing in: redirects to the identity provider',
      description:
        'Query `returnTo`: a path of the dashboard to come back to. Over plain HTTP only on a loopback address (the session cookie is Secure otherwise).',
      responses: {
        302: { description: 'To the identity provider’s authorization endpoint' },
        400: { description: 'Plain HTTP from another host than localhost', schema: simpleError },
        503: { description: 'No identity provider configured, or it cannot be reached', schema: simpleError },
      },
    },
    async ({ req, res }) => {
      const provider = deps.signIn();
      if (!provider)
        throw new ApiError('service_unavailable', {
          message:
            'Sign-in is not configured: set BERTH_OIDC_ISSUER, BERTH_OIDC_CLIENT_ID and BERTH_OIDC_CLIENT_SECRET (or BERTH_DEV_IDP=true for the development identity provider)',
        });
      if (!req.secure && !isLoopbackHost(req.hostname))
        throw new ApiError('validation_error', {
          message:
            'Sign in over HTTPS (behind a TLS-terminating proxy, set TRUST_PROXY=true): the session cookie is only sent over plain HTTP to localhost',
        });
      const redirectUri = callbackUrl(req, deps.publicUrl);
      let started;
      try {
        started = await provider.start(redirectUri);
      } catch (err) {
        // The user sees a 503 page; whoever runs Berth needs the cause in the log.
        deps.logger.error(
          { err: (err as Error).message, issuer: provider.issuer },
          'sign-in failed: the identity provider could not be used',
        );
        throw err;
      }
      req.session.oidc = {
        verifier: started.verifier,
        state: started.state,
        nonce: started.nonce,
        redirectUri,
        returnTo: safeReturn(req.query.returnTo),
      };
      await saved(req);
      res.redirect(302, started.url);
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/auth/callback',
      tag: 'dashboard',
      auth: 'none',
      summary: 'The identity provider’s redirect back: signs in (the first time: signs up)',
      responses: { 303: { description: 'To the dashboard (with `signin_error` when sign-in failed)' } },
    },
    async ({ req, res }) => {
      const pending = req.session.oidc;
      const provider = deps.signIn();
      if (!pending || !provider)
        return fail(res, 'The sign-in expired or was not started here: sign in again.');
      const error = req.query.error;
      if (typeof error === 'string') {
        delete req.session.oidc;
        const description = req.query.error_description;
        return fail(
          res,
          `The identity provider refused the sign-in: ${typeof description === 'string' ? description : error}`,
        );
      }
      const current = new URL(pending.redirectUri);
      current.search = new URL(req.originalUrl, 'http://callback').search;
      let identity;
      try {
        identity = await provider.finish(current, pending);
      } catch (err) {
        deps.logger.error({ err, issuer: provider.issuer }, 'sign-in failed');
        delete req.session.oidc;
        return fail(res, `Sign-in failed: ${(err as Error).message}`);
      }
      const { account, key } = await deps.keys.signIn(
        { issuer: identity.issuer, subject: identity.subject },
        identity.name,
      );
      if (key) deps.logger.info({ account: account.id, issuer: identity.issuer }, 'signup: account created');
      // A new session id at sign-in: an id planted before it (session fixation) signs nothing in.
      await new Promise<void>((resolve, reject) =>
        req.session.regenerate((err) => (err ? reject(err) : resolve())),
      );
      req.session.accountId = account.id;
      req.session.csrf = newCsrfToken();
      req.session.identity = identity;
      if (key)
        req.session.newKey = {
          id: key.id,
          name: key.name,
          scope: key.scope,
          prefix: key.prefix,
          value: key.value,
        };
      await saved(req);
      res.redirect(303, pending.returnTo);
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/auth/session',
      tag: 'dashboard',
      auth: 'none',
      summary: 'The dashboard’s session: who is signed in, and the CSRF token',
      responses: { 200: { description: 'The session', schema: sessionView } },
    },
    async ({ req, res }) => {
      const provider = deps.signIn();
      const signIn = {
        available: !!provider,
        label: provider?.label ?? null,
        development: provider?.development ?? false,
        url: '/auth/login',
      };
      res.setHeader('cache-control', 'no-store');
      const accountId = req.session.accountId;
      const account = accountId ? await deps.keys.findAccount(accountId) : null;
      if (!account || !req.session.csrf) return res.json({ signedIn: false, signIn });
      const newKey = req.session.newKey;
      if (newKey) delete req.session.newKey; // shown once
      res.json({
        signedIn: true,
        signIn,
        account: { id: account.id, name: account.name },
        identity: req.session.identity,
        csrfToken: req.session.csrf,
        ...(newKey ? { newKey } : {}),
      });
    },
  );

  routes.add(
    {
      method: 'post',
      path: '/auth/logout',
      tag: 'dashboard',
      auth: 'none',
      summary: 'Sign out: the session ends on every API replica',
      description: 'Needs the X-CSRF-Token header.',
      responses: {
        204: { description: 'Signed out (also when no session was signed in)' },
        403: { description: 'Missing or invalid CSRF token', schema: simpleError },
      },
    },
    async ({ req, res }) => {
      if (req.session.accountId && !csrfValid(req)) throw new ApiError('csrf_failed');
      await new Promise<void>((resolve, reject) =>
        req.session.destroy((err) => (err ? reject(err) : resolve())),
      );
      res.clearCookie(SESSION_COOKIE, { path: '/' });
      res.status(204).end();
    },
  );
}
