import type { Router } from 'express';
import { z } from 'zod';
import { requireKey } from '../http/auth.ts';
import type { KeyService } from '../keys/service.ts';
import type { ApiDoc } from '../openapi.ts';
import { openaiError } from '../openapi.ts';

const INFERENCE = ['inference', 'global'] as const;

const modelList = z.object({
  object: z.literal('list'),
  data: z.array(
    z.object({ id: z.string(), object: z.literal('model'), created: z.number().int(), owned_by: z.string() }),
  ),
});

/** GET /api/models: the Elastic catalog, in OpenAI's shape. */
export function registerModelRoutes(
  router: Router,
  doc: ApiDoc,
  deps: { keys: KeyService; models: readonly string[]; created: number },
): void {
  doc.add({
    method: 'get',
    path: '/api/models',
    tag: 'inference',
    auth: 'key',
    scopes: INFERENCE,
    summary: 'List the catalog models (OpenAI-compatible)',
    responses: {
      200: { description: 'Models', schema: modelList },
      401: { description: 'Missing, malformed or revoked key', schema: openaiError },
      403: { description: 'A compute key', schema: openaiError },
    },
  });
  const body = JSON.stringify({
    object: 'list',
    data: deps.models.map((id) => ({ id, object: 'model', created: deps.created, owned_by: 'berth' })),
  });
  router.get('/models', requireKey(deps.keys, INFERENCE), (_req, res) => {
    res.type('application/json').send(body);
  });
}
