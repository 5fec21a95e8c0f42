import { z } from 'zod';
import { ApiError } from '../errors.ts';
import type { Routes } from '../http/routes.ts';
import type { KeyService } from '../keys/service.ts';
import { simpleError } from '../openapi.ts';
import {
  createdKeyView,
  createKeyBody,
  globalKey as auth,
  globalKeyErrors as errors,
  keyView,
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
      body: createKeyBody,
      responses: {
        201: { description: 'The key, with its value shown once', schema: createdKeyView },
        400: { description: 'Invalid body', schema: simpleError },
        ...errors,
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
      summary: "List the account's keys (never their values)",
      responses: {
        200: { description: 'Keys, oldest first', schema: z.object({ data: z.array(keyView) }) },
        ...errors,
      },
    },
    async ({ caller, res }) => {
      const keys = await deps.keys.list(caller.accountId);
      res.json({ data: keys.map(viewKey) });
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
