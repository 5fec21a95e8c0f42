import type { Router } from 'express';
import { z } from 'zod';
import { ApiError } from '../errors.ts';
import { parse } from '../http/validate.ts';
import type { KeyService } from '../keys/service.ts';
import type { ApiDoc } from '../openapi.ts';
import { simpleError } from '../openapi.ts';
import { createdKeyView, createKeyBody, viewCreatedKey } from './views.ts';

const createAccountBody = z.strictObject({
  name: z.string().trim().min(1, 'must not be empty').max(200, 'must be at most 200 characters').optional(),
});
const accountView = z.object({ id: z.string(), name: z.string(), createdAt: z.string() });
const createdAccount = z.object({ account: accountView, key: createdKeyView });

/** Account signup and first keys, for the operator holding ADMIN_TOKEN. */
export function registerAdminRoutes(router: Router, doc: ApiDoc, deps: { keys: KeyService }): void {
  doc.add({
    method: 'post',
    path: '/admin/accounts',
    tag: 'admin',
    auth: 'admin',
    summary: 'Create an account and its default inference key',
    body: createAccountBody,
    responses: {
      201: { description: 'The account and its default key', schema: createdAccount },
      401: { description: 'Bad admin token', schema: simpleError },
    },
  });
  router.post('/accounts', async (req, res) => {
    const body = parse(createAccountBody, req.body ?? {});
    const { account, key } = await deps.keys.createAccount(body.name ?? 'account');
    res.status(201).json({
      account: { id: account.id, name: account.name, createdAt: account.createdAt.toISOString() },
      key: viewCreatedKey(key),
    });
  });

  doc.add({
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
  });
  router.post('/accounts/:id/keys', async (req, res) => {
    const body = parse(createKeyBody, req.body);
    const key = await deps.keys.createKeyForAccount(String(req.params.id), body);
    if (!key) throw new ApiError('not_found', { message: 'Account not found' });
    res.status(201).json(viewCreatedKey(key));
  });
}
