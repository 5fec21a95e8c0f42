// A standalone OpenID Connect provider for tests: the same oidc-provider setup as the API's
// development provider, in its own process and on its own port, labelled differently.
import express from 'express';
// The module itself, not @berth/api: this process needs none of the rest of the API.
import { devIdentityProvider } from '../../apps/api/src/accounts/sign-in/dev-idp.ts';

const env = (name: string) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is required`);
  return v;
};
const issuer = env('OIDC_ISSUER');
const app = express();
app.use(
  new URL(issuer).pathname,
  devIdentityProvider({
    issuer,
    clientId: env('OIDC_CLIENT_ID'),
    clientSecret: env('OIDC_CLIENT_SECRET'),
    redirectUris: env('OIDC_REDIRECT_URIS').split(' '),
    label: 'Test identity provider (separate process)',
  }),
);
const server = app.listen(Number(env('OIDC_PORT')), '127.0.0.1', () => console.error(`listening ${issuer}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
