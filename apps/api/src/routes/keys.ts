import type { Router } from 'express';
import { z } from 'zod';
import { ApiError } from '../errors.ts';
import { principalOf, requireKey } from '../http/auth.ts';
import { parse } from '../http/validate.ts';
import type { KeyService } from '../keys/service.ts';
import type { ApiDoc } from '../openapi.ts';
import { simpleError } from '../openapi.ts';
import { createdKeyView, createKeyBody, keyView, viewCreatedKey, viewKey } from './views.ts';

const MANAGE = ['global'] as const;

/** Settings → Keys: create, list and revoke the account's keys (a global key is required). */
export function registerKeyRoutes(router: Router, doc: ApiDoc, deps: { keys: KeyService }): void {
  const auth = requireKey(deps.keys, MANAGE);
  const errors = {
    401: { description: 'Missing, malformed or revoked key', schema: simpleError },
    403: { description: 'The key is not a global key', schema: simpleError },
  };

  doc.add({
    method: 'post',
    path: '/api/keys',
    tag: 'keys',
    auth: 'key',
    scopes: MANAGE,
    summary: 'Create an API key',
    body: createKeyBody,
    responses: {
      201: { description: 'The key, with its value shown once', schema: createdKeyView },
      400: { description: 'Invalid body', schema: simpleError },
      ...errors,
    },
  });
  router.post('/keys', auth, async (req, res) => {
    const body = parse(createKeyBody, req.body);
    const key = await deps.keys.createKey({ ...body, accountId: principalOf(res).accountId });
    res.status(201).json(viewCreatedKey(key));
  });

  doc.add({
    method: 'get',
    path: '/api/keys',
    tag: 'keys',
    auth: 'key',
    scopes: MANAGE,
    summary: "List the account's keys (never their values)",
    responses: {
      200: { description: 'Keys, oldest first', schema: z.object({ data: z.array(keyView) }) },
      ...errors,
    },
  });
  router.get('/keys', auth, async (_req, res) => {
    const keys = await deps.keys.list(principalOf(res).accountId);
    res.json({ data: keys.map(viewKey) });
  });

  doc.add({
    method: 'delete',
    path: '/api/keys/{id}',
    tag: 'keys',
    auth: 'key',
    scopes: MANAGE,
    summary: 'Revoke a key, immediately on every API replica',
    description:
      'Requests in flight with the key end with 401 `Invalid API key`. Revoking a revoked key succeeds and keeps the first revocation time.',
    responses: {
      200: { description: 'The revoked key', schema: keyView },
      404: { description: 'No such key in this account', schema: simpleError },
      ...errors,
    },
  });
  router.delete('/keys/:id', auth, async (req, res) => {
    const key = await deps.keys.revoke(principalOf(res).accountId, String(req.params.id));
    if (!key) throw new ApiError('not_found', { message: 'API key not found' });
    res.json(viewKey(key));
  });
}
