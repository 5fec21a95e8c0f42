import { z } from 'zod';
import { ApiError } from '../errors.ts';
import type { Routes } from '../http/routes.ts';
import type { KeyService } from '../keys/service.ts';
import { simpleError } from '../openapi.ts';
import { createdKeyView, createKeyBody, viewCreatedKey } from './views.ts';

const createAccountBody = z.strictObject({
  name: z.string().trim().min(1, 'must not be empty').max(200, 'must be at most 200 characters').optional(),
});
const accountView = z.object({ id: z.string(), name: z.string(), createdAt: z.string() });
const createdAccount = z.object({ account: accountView, key: createdKeyView });

/** Account signup and first keys, for the operator holding ADMIN_TOKEN (checked where /admin is mounted). */
export function registerAdminRoutes(routes: Routes, deps: { keys: KeyService }): void {
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
