import { z } from 'zod';
import { ApiError } from '../platform/errors.ts';
import type { Routes } from '../http/routes.ts';
import type { KeyService } from './keys/service.ts';
import { simpleError } from '../http/openapi.ts';
import { humanName, parse } from '../http/validate.ts';
import type { AccountRepository } from './repository.ts';
import { createdKeyView, createKeyBody, viewCreatedKey } from './keys/views.ts';
import { effectiveQuotas, type QuotaOverrides, type Quotas } from './quotas.ts';

const createAccountBody = z.strictObject({
  name: humanName(200).optional(),
});
const accountView = z.object({ id: z.string(), name: z.string(), createdAt: z.string() });
const createdAccount = z.object({ account: accountView, key: createdKeyView });
const accountPage = z.object({
  data: z.array(accountView),
  hasMore: z.boolean().describe('Whether another page follows'),
  next: z.string().nullable().describe('The `after` value of the next page; null on the last page'),
});
const listAccountsQuery = z.strictObject({
  name: z.string().trim().min(1, 'must not be empty').max(200).optional(),
  limit: z.coerce
    .number({ error: 'must be a number' })
    .int('must be a whole number')
    .min(1, 'must be between 1 and 100')
    .max(100, 'must be between 1 and 100')
    .default(50),
  after: z.string().min(1, 'must not be empty').optional(),
});

/** Account signup and first keys, for the operator holding ADMIN_TOKEN (checked where /admin is mounted). */
export function registerAdminRoutes(
  routes: Routes,
  deps: { keys: KeyService; accounts?: AccountRepository; quotaDefaults?: Quotas },
): void {
  const accounts = deps.accounts;
  const defaults = deps.quotaDefaults;
  if (accounts && defaults) registerQuotaRoutes(routes, accounts, defaults);
  if (accounts)
    routes.add(
      {
        method: 'get',
        path: '/admin/accounts',
        tag: 'admin',
        auth: 'admin',
        summary: 'List accounts, oldest first; `name` searches (case-insensitive substring)',
        description:
          'Query: `name` (part of the name, any case), `limit` (1–100, default 50), `after` (the `next` of the previous page).',
        responses: {
          200: { description: 'One page of accounts', schema: accountPage },
          400: { description: 'A query parameter is invalid (named in the message)', schema: simpleError },
          401: { description: 'Bad admin token', schema: simpleError },
        },
      },
      async ({ req, res }) => {
        const q = parse(listAccountsQuery, req.query, 'query');
        if (q.after && !(await accounts.exists(q.after)))
          throw new ApiError('validation_error', {
            message: `Invalid query: after: no account ${q.after}`,
            param: 'after',
          });
        const rows = await accounts.list({ ...q, limit: q.limit + 1 });
        const page = rows.slice(0, q.limit);
        res.json({
          data: page.map((a) => ({ id: a.id, name: a.name, createdAt: a.createdAt.toISOString() })),
          hasMore: rows.length > q.limit,
          next: rows.length > q.limit ? page.at(-1)!.id : null,
        });
      },
    );

  routes.add(
    {
      method: 'post',
      path: '/admin/accounts',
      tag: 'admin',
      auth: 'admin',
      summary: 'Create an account and its default inference key',
      // No body at all is a body with no fields.
      body: createAccountBody.default({}),
      responses: {
        201: { description: 'The account and its default key', schema: createdAccount },
        401: { description: 'Bad admin token', schema: simpleError },
      },
    },
    async ({ body, res }) => {
      const { account, key } = await deps.keys.createAccount(body().name ?? 'account');
      res.status(201).json({
        account: { id: account.id, name: account.name, createdAt: account.createdAt.toISOString() },
        key: viewCreatedKey(key),
      });
    },
  );

  routes.add(
    {
      method: 'post',
      path: '/admin/accounts/{id}/keys',
      tag: 'admin',
      auth: 'admin',
      summary: 'Create a key of any scope for an account',
      body: createKeyBody,
      responses: {
        201: { description: 'The key, with its value shown once', schema: createdKeyView },
        404: { description: 'No such account', schema: simpleError },
      },
    },
    async ({ params, body, res }) => {
      const key = await deps.keys.createKeyForAccount(params.id, body());
      if (!key) throw new ApiError('not_found', { message: 'Account not found' });
      res.status(201).json(viewCreatedKey(key));
    },
  );
}

const quotaOverride = (what: string) =>
  z
    .int({ error: 'must be a whole number, or null for the default' })
    .min(1, 'must be at least 1, or null for the default')
    .max(1_000_000, 'must be at most 1000000')
    .nullable()
    .optional()
    .describe(`${what}; null: back to the API's default`);
const quotasBody = z.strictObject({
  keys: quotaOverride('Active API keys'),
  endpoints: quotaOverride('Dedicated endpoints'),
  gpus: quotaOverride('GPUs: Σ scaling.maxReplicas × hardware.gpuCount over the endpoints'),
  chronos_runs: quotaOverride('Chronos scheduled runs'),
});
const limits = z.object({
  keys: z.number(),
  endpoints: z.number(),
  gpus: z.number(),
  chronos_runs: z.number(),
});
const quotasView = z.object({
  object: z.literal('account_quotas'),
  account: z.string(),
  limits: limits.describe('What applies to the account: its override, else the default'),
  overrides: z.object({
    keys: z.number().nullable(),
    endpoints: z.number().nullable(),
    gpus: z.number().nullable(),
    chronos_runs: z.number().nullable(),
  }),
  defaults: limits.describe(
    'BERTH_QUOTA_KEYS, BERTH_QUOTA_ENDPOINTS, BERTH_QUOTA_GPUS, BERTH_QUOTA_CHRONOS_RUNS',
  ),
});

/** One account's quotas: read, and raised or lowered by the platform operator. */
function registerQuotaRoutes(routes: Routes, accounts: AccountRepository, defaults: Quotas): void {
  const view = (id: string, overrides: QuotaOverrides): z.infer<typeof quotasView> => ({
    object: 'account_quotas',
    account: id,
    limits: effectiveQuotas(defaults, overrides),
    overrides,
    defaults,
  });
  const notFound = () => new ApiError('not_found', { message: 'Account not found' });
  routes.add(
    {
      method: 'get',
      path: '/admin/accounts/{id}/quotas',
      tag: 'admin',
      auth: 'admin',
      summary: "An account's quotas: the limits that apply, its overrides and the defaults",
      responses: {
        200: { description: 'The quotas', schema: quotasView },
        401: { description: 'Bad admin token', schema: simpleError },
        404: { description: 'No such account', schema: simpleError },
      },
    },
    async ({ params, res }) => {
      const overrides = await accounts.quotas(params.id);
      if (!overrides) throw notFound();
      res.json(view(params.id, overrides));
    },
  );
  routes.add(
    {
      method: 'patch',
      path: '/admin/accounts/{id}/quotas',
      tag: 'admin',
      auth: 'admin',
      summary: "Set an account's own quotas (null: back to the default)",
      description:
        'Fields left out keep their value. A lower limit refuses new keys, endpoints, GPUs or Chronos runs beyond it; what the account already has is kept.',
      body: quotasBody,
      responses: {
        200: { description: 'The quotas', schema: quotasView },
        400: { description: 'Invalid body (the field is named)', schema: simpleError },
        401: { description: 'Bad admin token', schema: simpleError },
        404: { description: 'No such account', schema: simpleError },
      },
    },
    async ({ params, body, res }) => {
      const b = body();
      const overrides = await accounts.setQuotas(params.id, {
        ...(b.keys !== undefined ? { keys: b.keys } : {}),
        ...(b.endpoints !== undefined ? { endpoints: b.endpoints } : {}),
        ...(b.gpus !== undefined ? { gpus: b.gpus } : {}),
        ...(b.chronos_runs !== undefined ? { chronos_runs: b.chronos_runs } : {}),
      });
      if (!overrides) throw notFound();
      res.json(view(params.id, overrides));
    },
  );
}
