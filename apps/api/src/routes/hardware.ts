import type { Router } from 'express';
import { z } from 'zod';
import type { Catalog } from '@berth/crds';
import { requireKey } from '../http/auth.ts';
import type { KeyService } from '../keys/service.ts';
import type { ApiDoc } from '../openapi.ts';
import { simpleError } from '../openapi.ts';

const hardwareView = z.object({
  id: z.string().describe('The value of hardware.gpuType'),
  gpuType: z.string(),
  gpuMemoryGiB: z.number().describe('Memory of one GPU'),
  allowedGpuCounts: z.array(z.number()),
  available: z.boolean(),
});

/** GET /api/hardware: the instance types endpoints can be provisioned on. Any valid key. */
export function registerHardwareRoutes(
  router: Router,
  doc: ApiDoc,
  deps: { keys: KeyService; catalog: Catalog },
): void {
  doc.add({
    method: 'get',
    path: '/api/hardware',
    tag: 'endpoints',
    auth: 'key',
    scopes: ['inference', 'compute', 'global'],
    summary: 'Instance types: GPU type id, GPU memory, allowed GPU counts, availability',
    responses: {
      200: { description: 'The catalog', schema: z.object({ data: z.array(hardwareView) }) },
      401: { description: 'No valid key', schema: simpleError },
    },
  });
  const body = JSON.stringify({
    data: deps.catalog.instanceTypes.map((t) => ({
      id: t.id,
      gpuType: t.gpuType,
      gpuMemoryGiB: t.gpuMemoryGiB,
      allowedGpuCounts: t.allowedGpuCounts,
      available: t.available,
    })),
  });
  router.get('/hardware', requireKey(deps.keys, ['inference', 'compute', 'global']), (_req, res) => {
    res.type('application/json').send(body);
  });
}
