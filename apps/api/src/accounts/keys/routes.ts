import { z } from 'zod';
import { ApiError } from '../../platform/errors.ts';
import type { Routes } from '../../http/routes.ts';
import type { KeyService } from './service.ts';
import { simpleError } from '../../http/openapi.ts';
import { parse } from '../../http/validate.ts';
import {
  createdKeyView,
  createKeyBody,
  keyView,
  rotateKeyBody,
  rotatedKeyView,
  updateKeyBody,
  viewKey,
} from './views.ts';
import type { KeyRecord } from './repository.ts';
import { globalKeyErrors as errors, globalKey as auth } from '../../http/auth.ts';
import { pageOf, listPage, listQuery } from '../../http/lists.ts';

/** The answers of a change to one key besides success. */
const changeErrors = (conflict: string) => ({
  400: { description: 'Invalid body (the field is named)', schema: simpleError },
  404: { description: 'No such key in this account', schema: simpleError },
  409: { description: `\`key_conflict\`: ${conflict}`, schema: simpleError },
  ...errors,
});

export const whoamiView = z.object({
  object: z.literal('whoami'),
  account: z.object({ id: z.string() }),
  key: keyView.pick({ id: true, name: true, prefix: true, scope: true }),
});

/**
 * Settings → Keys: create, list, change, rotate and revoke the account's keys (a global key is
 * required); and which account and key a request acts as (any key).
 */
export function registerKeyRoutes(routes: Routes, deps: { keys: KeyService }): void {
  /** Keys as shown: each with what its spend limit's period has spent so far. */
  const shown = async (accountId: string, keys: KeyRecord[]) => {
    const spend = await deps.keys.spend(
      accountId,
      keys.filter((k) => k.spendLimit).map((k) => k.id),
    );
    const now = new Date();
    return keys.map((k) => viewKey(k, now, spend.get(k.id)));
  };
  const one = async (accountId: string, key: KeyRecord) => (await shown(accountId, [key]))[0]!;
  const notFound = () => new ApiError('not_found', { message: 'API key not found' });
  /** The account's key of that id (404 otherwise, before anything else about the request is looked at). */
  const owned = async (accountId: string, id: string) => {
    const key = (await deps.keys.list(accountId)).find((k) => k.id === id);
    if (!key) throw notFound();
    return key;
  };

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
        'An account holds at most BERTH_QUOTA_KEYS active keys (default 100): beyond it, 403 `quota_exceeded`, and no key is created. Revoked and expired keys, and keys in their grace period after a rotation, do not count. A `pinnedModel` nothing serves for the account (not a catalog chat model, not one of its dedicated endpoints, not `auto`) is refused with 400 naming the field.',
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
      res.status(201).json({ ...(await one(caller.accountId, key)), value: key.value });
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
      res.json(pageOf(await shown(caller.accountId, page.keys), page.hasMore));
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/api/keys/{id}',
      tag: 'keys',
      auth,
      summary: 'One key (never its value), with what its spend limit has spent this period',
      responses: {
        200: { description: 'The key', schema: keyView },
        404: { description: 'No such key in this account', schema: simpleError },
        ...errors,
      },
    },
    async ({ caller, params, res }) => {
      const key = await owned(caller.accountId, params.id);
      res.json(await one(caller.accountId, key));
    },
  );

  routes.add(
    {
      method: 'patch',
      path: '/api/keys/{id}',
      tag: 'keys',
      auth,
      summary: "Change a key's name, pinned model, tool pin, expiry, spend limit or fallback setting",
      description:
        'Fields given change; the others stay (null clears `pinnedModel`, `expiresAt` and `spendLimit`). Applies on every API replica before the answer. A revoked, expired or rotated-out key cannot be changed (409 `key_conflict`).',
      body: updateKeyBody,
      responses: {
        200: { description: 'The key as changed', schema: keyView },
        ...changeErrors('the key is revoked, expired or rotated out'),
      },
    },
    async ({ caller, params, body, res }) => {
      // Another account's id (or none) is 404 whatever the body: the same answer as an unknown id.
      await owned(caller.accountId, params.id);
      const key = await deps.keys.update(caller.accountId, params.id, body());
      if (!key) throw notFound();
      res.json(await one(caller.accountId, key));
    },
  );

  routes.add(
    {
      method: 'post',
      path: '/api/keys/{id}/rotate',
      tag: 'keys',
      auth,
      summary: 'Rotate a key: a new key (its value shown once) replaces it after a grace period',
      description:
        'The new key has the old one’s name, scope and settings (a spend limit counts both keys together). The old key keeps working until `previous.graceExpiresAt` (`gracePeriodSeconds`, default 86400, at most 30 days; 0: at once), then every API replica refuses it with 401 `api_key_rotated`. A key that expires gives its successor the same lifetime from now unless `expiresAt` is given. A key is rotated once (409 `key_conflict` after); revoked or expired keys cannot be rotated.',
      body: rotateKeyBody,
      responses: {
        201: {
          description: 'The new key, with its value shown once, and the old one',
          schema: rotatedKeyView,
        },
        ...changeErrors('already rotated, revoked or expired'),
      },
    },
    async ({ caller, params, body, res }) => {
      await owned(caller.accountId, params.id);
      const b = body();
      const rotated = await deps.keys.rotate(caller.accountId, params.id, {
        ...(b.gracePeriodSeconds !== undefined ? { graceSeconds: b.gracePeriodSeconds } : {}),
        ...(b.expiresAt !== undefined ? { expiresAt: b.expiresAt } : {}),
      });
      if (!rotated) throw notFound();
      const [key, previous] = await shown(caller.accountId, [rotated.key, rotated.previous]);
      res.status(201).json({ ...key!, value: rotated.key.value, previous: previous! });
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
      if (!key) throw notFound();
      res.json(await one(caller.accountId, key));
    },
  );
}
