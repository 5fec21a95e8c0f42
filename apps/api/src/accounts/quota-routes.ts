import { z } from 'zod';
import type { DedicatedEndpoint } from '@berth/crds';
import type { Routes } from '../http/routes.ts';
import type { KeyService } from './keys/service.ts';
import { simpleError } from '../http/openapi.ts';
import { effectiveQuotas, endpointUsage, type Quotas } from './quotas.ts';
import type { AccountRepository } from './repository.ts';

const quota = z.object({ limit: z.number(), usage: z.number() });
export const quotasView = z.object({
  object: z.literal('quotas'),
  keys: quota.describe('Active (not revoked) API keys'),
  endpoints: quota.describe('Dedicated endpoints not being terminated'),
  gpus: quota.describe('Σ scaling.maxReplicas × hardware.gpuCount over those endpoints'),
  chronos_runs: quota.describe('Chronos scheduled runs'),
});

/** GET /api/quotas: the caller's account's limits and how much of each it uses. */
export function registerQuotaRoutes(
  routes: Routes,
  deps: {
    keys: KeyService;
    accounts: Pick<AccountRepository, 'quotas'>;
    defaults: Quotas;
    /** Absent when no endpoint runtime is configured (no endpoints, then). */
    endpoints?: { list(): readonly DedicatedEndpoint[] };
    /** How many Chronos runs the account has (absent: Chronos is not served, none). */
    chronosRuns?: (accountId: string) => Promise<number>;
  },
): void {
  routes.add(
    {
      method: 'get',
      path: '/api/quotas',
      tag: 'keys',
      auth: { scopes: ['compute', 'global'], session: 'manage' },
      summary: "The account's quotas: each limit and the account's usage",
      description:
        'A creation past a limit answers 403 `quota_exceeded`. Endpoint usage is read from the API’s cache of endpoints: a change made a moment ago may show a little later.',
      responses: {
        200: { description: 'Limits and usage', schema: quotasView },
        401: { description: 'Missing, malformed or revoked key', schema: simpleError },
        403: { description: 'Not a compute or global key', schema: simpleError },
      },
    },
    async ({ caller, res }) => {
      const limits = effectiveQuotas(deps.defaults, await deps.accounts.quotas(caller.accountId));
      const activeKeys = (await deps.keys.list(caller.accountId)).filter((k) => !k.revokedAt).length;
      const { endpoints, gpus } = endpointUsage(deps.endpoints?.list() ?? [], caller.accountId);
      const view: z.infer<typeof quotasView> = {
        object: 'quotas',
        keys: { limit: limits.keys, usage: activeKeys },
        endpoints: { limit: limits.endpoints, usage: endpoints },
        gpus: { limit: limits.gpus, usage: gpus },
        chronos_runs: {
          limit: limits.chronos_runs,
          usage: deps.chronosRuns ? await deps.chronosRuns(caller.accountId) : 0,
        },
      };
      res.json(view);
    },
  );
}
