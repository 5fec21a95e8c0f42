import { z } from 'zod';
import { ApiError } from '../errors.ts';
import type { Routes } from '../http/routes.ts';
import type { KeyService } from '../keys/service.ts';
import { simpleError } from '../openapi.ts';
import { parse } from '../http/validate.ts';
import {
  createdKeyView,
  createKeyBody,
  globalKey as auth,
  globalKeyErrors as errors,
  keyView,
  listPage,
  listQuery,
  pageOf,
  viewCreatedKey,
  viewKey,
} from './views.ts';

export const whoamiView = z.object({
  object: z.literal('whoami'),
  account: z.object({ id: z.string() }),
  key: keyView.pick({ id: true, name: true, prefix: true, scope: true }),
});

/**
 * Settings → Keys: create, list and revoke the account's keys (a global key is required); and which
 * account and key a request acts as (any key).
 */
export function registerKeyRoutes(routes: Routes, deps: { keys: KeyService }): void {
  routes.add(
    {
      method: 'get',
      path: '/api/whoami',
      tag: 'keys',
      auth: { scopes: ['inference', 'compute', 'global'] },
      summary: 'The account and key this request is made with',
      description:
        'The spec names no such route; command-line tools need it to show who they are logged in as (`berth whoami`). Any active key may call it.',
      responses: {
        200: { description: 'Account and key (its prefix, never its value)', schema: whoamiView },
        401: { description: 'Missing, malformed or revoked key', schema: simpleError },
      },
    },
    async ({ caller, res }) => {
      const key = (await deps.keys.list(caller.accountId)).find((k) => k.id === caller.principal.keyId);
      // Revoked between verification and now: the key is no longer anyone.
      if (!key || key.revokedAt) throw new ApiError('invalid_api_key');
      const { id, name, prefix, scope } = viewKey(key);
      res.json({ object: 'whoami', account: { id: caller.accountId }, key: { id, name, prefix, scope } });
    },
  );

  routes.add(
    {
      method: 'post',
      path: '/api/keys',
      tag: 'keys',
      auth,
      summary: 'Create an API key',
      description:
        'An account holds at most BERTH_QUOTA_KEYS active keys (default 100): beyond it, 403 `quota_exceeded`, and no key is created. Revoked keys do not count.',
      body: createKeyBody,
      responses: {
        201: { description: 'The key, with its value shown once', schema: createdKeyView },
        400: { description: 'Invalid body', schema: simpleError },
        ...errors,
        403: {
          description:
            'The key is not a global key, or `quota_exceeded`: the account already has as many active keys as its quota allows (the message names usage, limit and how to raise it)',
          schema: simpleError,
        },
      },
    },
    async ({ caller, body, res }) => {
      const key = await deps.keys.createKey({ ...body(), accountId: caller.accountId });
      res.status(201).json(viewCreatedKey(key));
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/api/keys',
      tag: 'keys',
      auth,
      summary: "List the account's keys (never their values), oldest first, a page at a time",
      description:
        'Query: `limit` (1–100, default 100) and `after` (the `last_id` of the previous page). Revoked keys are listed too.',
      query: listQuery,
      responses: {
        200: { description: 'One page of keys, oldest first', schema: listPage(keyView) },
        400: { description: '`limit` or `after` is invalid (named in the message)', schema: simpleError },
        ...errors,
      },
    },
    async ({ req, caller, res }) => {
      const q = parse(listQuery, req.query, 'query');
      const page = await deps.keys.page(caller.accountId, q);
      if (!page)
        throw new ApiError('validation_error', {
          message: `Invalid query: after: no key ${q.after} in this account`,
          param: 'after',
        });
      res.json(pageOf(page.keys.map(viewKey), page.hasMore));
    },
  );

  routes.add(
    {
      method: 'delete',
      path: '/api/keys/{id}',
      tag: 'keys',
      auth,
      summary: 'Revoke a key, immediately on every API replica',
      description:
        'Requests in flight with the key end with 401 `Invalid API key`. Revoking a revoked key succeeds and keeps the first revocation time.',
      responses: {
        200: { description: 'The revoked key', schema: keyView },
        404: { description: 'No such key in this account', schema: simpleError },
        ...errors,
      },
    },
    async ({ caller, params, res }) => {
      const key = await deps.keys.revoke(caller.accountId, params.id);
      if (!key) throw new ApiError('not_found', { message: 'API key not found' });
      res.json(viewKey(key));
    },
  );
}
