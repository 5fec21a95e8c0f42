// The dashboard's sign-in, assembled: sessions in PostgreSQL, the configured OpenID Connect provider
// or, in local mode, the in-process development provider at /idp.
import { createHmac, randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Router } from 'express';
import type { Config } from '../../platform/config.ts';
import type { Logger } from '../../platform/logger.ts';
import type { SessionRepository } from './session-repository.ts';
import { devIdentityProvider } from './dev-idp.ts';
import { oidcSignIn, type SignInProvider } from './oidc.ts';
import { dashboardSessions, type Sessions } from './sessions.ts';

export const DEV_IDP_PATH = '/idp';
const DEV_CLIENT_ID = 'berth-dashboard';

export interface DashboardAuth {
  sessions: Sessions;
  signIn(): SignInProvider | undefined;
  /** The development identity provider, to mount at /idp (set once the port is known). */
  devIdp(): Router | undefined;
  /**
   * Called once the server listens: the development provider's issuer is built from the address and
   * port the server actually bound (HOST may be unset), or PUBLIC_URL.
   */
  listening(address: AddressInfo): void;
  close(): void;
}

export function dashboardAuth(deps: {
  config: Config;
  sessions: SessionRepository;
  adminToken: string;
  logger: Logger;
}): DashboardAuth {
  const c = deps.config;
  const sessions = dashboardSessions({
    repo: deps.sessions,
    secret: createHmac('sha256', deps.adminToken).update('berth sessions').digest('hex'),
    ttlHours: c.BERTH_SESSION_TTL_HOURS,
    logger: deps.logger,
  });
  let provider: SignInProvider | undefined;
  let idp: Router | undefined;
  if (c.BERTH_OIDC_ISSUER && c.BERTH_OIDC_CLIENT_ID && c.BERTH_OIDC_CLIENT_SECRET) {
    provider = oidcSignIn({
      issuer: c.BERTH_OIDC_ISSUER,
      clientId: c.BERTH_OIDC_CLIENT_ID,
      clientSecret: c.BERTH_OIDC_CLIENT_SECRET,
    });
  }
  const dev = c.BERTH_DEV_IDP === 'true' || (c.BERTH_DEV_IDP === 'auto' && !c.DATABASE_URL && !provider);
  return {
    sessions,
    signIn: () => provider,
    devIdp: () => idp,
    listening(address) {
      if (!dev) return;
      const port = address.port;
      const bases = new Set([
        ...(c.PUBLIC_URL ? [c.PUBLIC_URL.replace(/\/$/, '')] : []),
        `http://${reachableHost(address.address)}:${port}`,
        `http://localhost:${port}`,
        `http://127.0.0.1:${port}`,
      ]);
      const issuer = `${[...bases][0]}${DEV_IDP_PATH}`;
      const clientSecret = randomBytes(24).toString('hex');
      idp = devIdentityProvider({
        issuer,
        clientId: DEV_CLIENT_ID,
        clientSecret,
        redirectUris: [...bases].map((b) => `${b}/auth/callback`),
        label: 'Berth development identity provider',
        proxy: c.TRUST_PROXY,
      });
      provider = oidcSignIn({
        issuer,
        clientId: DEV_CLIENT_ID,
        clientSecret,
        label: 'Development identity provider (local only)',
        development: true,
      });
      deps.logger.warn(
        { issuer },
        'dashboard sign-in uses the development identity provider (no passwords; set BERTH_OIDC_ISSUER for a real one)',
      );
    },
    close: () => sessions.close(),
  };
}

/**
 * How this machine reaches the address a server bound: the unspecified addresses (every interface)
 * through loopback, an IPv6 address in brackets.
 */
export function reachableHost(bound: string): string {
  if (bound === '0.0.0.0' || bound === '') return '127.0.0.1';
  if (bound === '::') return '[::1]';
  return bound.includes(':') ? `[${bound}]` : bound;
}
