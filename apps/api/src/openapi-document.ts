// The OpenAPI document as a file: the same document GET /openapi.json serves, built from the routes'
// own declarations with every optional part (accounts and quotas, billing, dedicated endpoints, Elastic, tools, Olympus, Chronos, sign-in) present. Nothing runs: the
// dependencies are never called while routes are declared. `npm run openapi -w @berth/api` writes it
// to apps/api/generated/openapi.json (+ openapi.d.ts); a test fails when the file is stale.
import { DEFAULT_CATALOG } from '@berth/crds';
import { pino } from 'pino';
import { createApp, type AppDeps } from './app.ts';
import { parseConfig } from './platform/config.ts';

/** A dependency that may be looked at (its parts are more of the same) but never called. */
function unusedDep(name: string): never {
  return new Proxy(() => {}, {
    get: (_target, prop) => (prop === 'then' ? undefined : unusedDep(`${name}.${String(prop)}`)),
    apply() {
      throw new Error(`openapi-document: ${name}() was called while generating the document`);
    },
  }) as never;
}
const unused = unusedDep('deps');

export function openapiDocument(): Record<string, unknown> {
  const deps: AppDeps = {
    config: parseConfig({}),
    catalog: DEFAULT_CATALOG,
    endpoints: { runtime: unused, upstream: unused, dispatcher: unused, usage: unused, limiter: unused },
    billing: unused,
    elastic: unused,
    tools: unused,
    olympus: unused,
    chronos: unused,
    auth: unused,
    adminToken: 'unused-admin-token-for-the-document',
    keys: unused,
    accounts: unused,
    health: unused,
    metrics: unused,
    logger: pino({ level: 'silent' }),
    lifecycle: unused,
  };
  return createApp(deps).locals.openapi as Record<string, unknown>;
}
