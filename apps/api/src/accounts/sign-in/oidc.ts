// Sign-in with any OpenID Connect provider (authorization code + PKCE), through openid-client.
import * as oidc from 'openid-client';
import { ApiError } from '../../platform/errors.ts';
import { accountName, subjectProblem } from './claims.ts';

export interface SignInProvider {
  issuer: string;
  /** What the dashboard's sign-in button names. */
  label: string;
  /** The in-process development provider (labelled as such in the dashboard). */
  development: boolean;
  /** The authorization URL to send the browser to, and the checks to keep in the session. */
  start(redirectUri: string): Promise<{ url: string; verifier: string; state: string; nonce: string }>;
  /** Exchanges the code of the callback URL; the identity that signed in. */
  finish(
    callbackUrl: URL,
    checks: { verifier: string; state: string; nonce: string },
  ): Promise<{ issuer: string; subject: string; name: string }>;
}

export function oidcSignIn(o: {
  issuer: string;
  clientId: string;
  clientSecret: string;
  label?: string;
  development?: boolean;
}): SignInProvider {
  // Plain HTTP only for a provider on this machine (the config refuses other http:// issuers).
  const insecure = new URL(o.issuer).protocol === 'http:';
  let config: Promise<oidc.Configuration> | undefined;
  const configuration = () =>
    (config ??= oidc
      .discovery(
        new URL(o.issuer),
        o.clientId,
        o.clientSecret,
        undefined,
        insecure ? { execute: [oidc.allowInsecureRequests] } : undefined,
      )
      .catch((err: unknown) => {
        config = undefined; // try again at the next sign-in
        throw new ApiError('service_unavailable', {
          message: `The identity provider ${o.issuer} cannot be reached: ${(err as Error).message}`,
        });
      }));
  return {
    issuer: o.issuer,
    label: o.label ?? new URL(o.issuer).host,
    development: o.development ?? false,
    async start(redirectUri) {
      const c = await configuration();
      const verifier = oidc.randomPKCECodeVerifier();
      const state = oidc.randomState();
      const nonce = oidc.randomNonce();
      const url = oidc.buildAuthorizationUrl(c, {
        redirect_uri: redirectUri,
        scope: 'openid profile email',
        code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
        code_challenge_method: 'S256',
        state,
        nonce,
      });
      return { url: url.href, verifier, state, nonce };
    },
    async finish(callbackUrl, checks) {
      const c = await configuration();
      const tokens = await oidc.authorizationCodeGrant(c, callbackUrl, {
        pkceCodeVerifier: checks.verifier,
        expectedState: checks.state,
        expectedNonce: checks.nonce,
        idTokenExpected: true,
      });
      const claims = tokens.claims();
      if (!claims) throw new Error('the identity provider returned no ID token');
      const problem = subjectProblem(claims.sub);
      if (problem) throw new Error(problem);
      return { issuer: claims.iss, subject: claims.sub, name: accountName(claims, claims.sub) };
    },
  };
}
