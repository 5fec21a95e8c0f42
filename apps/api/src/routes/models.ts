import { z } from 'zod';
import type { Routes } from '../http/routes.ts';
import { openaiError } from '../openapi.ts';

const modelList = z.object({
  object: z.literal('list'),
  data: z.array(
    z.object({ id: z.string(), object: z.literal('model'), created: z.number().int(), owned_by: z.string() }),
  ),
});

/** GET /api/models: the Elastic catalog, in OpenAI's shape. */
export function registerModelRoutes(
  routes: Routes,
  deps: { models: readonly string[]; created: number },
): void {
  const body = JSON.stringify({
    object: 'list',
    data: deps.models.map((id) => ({ id, object: 'model', created: deps.created, owned_by: 'berth' })),
  });
  routes.add(
    {
      method: 'get',
      path: '/api/models',
      tag: 'inference',
      auth: { scopes: ['inference', 'global'], session: 'manage' },
      summary: 'List the catalog models (OpenAI-compatible)',
      responses: {
        200: { description: 'Models', schema: modelList },
        401: { description: 'Missing, malformed or revoked key', schema: openaiError },
        403: { description: 'A compute key', schema: openaiError },
      },
    },
    ({ res }) => {
      res.type('application/json').send(body);
    },
  );
}
