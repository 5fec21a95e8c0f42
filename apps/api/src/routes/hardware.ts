import { z } from 'zod';
import type { Catalog } from '@berth/crds';
import type { Routes } from '../http/routes.ts';
import { simpleError } from '../openapi.ts';

const hardwareView = z.object({
  id: z.string().describe('The value of hardware.gpuType'),
  gpuType: z.string(),
  gpuMemoryGiB: z.number().describe('Memory of one GPU'),
  allowedGpuCounts: z.array(z.number()),
  available: z.boolean(),
});

/** GET /api/hardware: the instance types endpoints can be provisioned on. Any valid key. */
export function registerHardwareRoutes(routes: Routes, deps: { catalog: Catalog }): void {
  const body = JSON.stringify({
    data: deps.catalog.instanceTypes.map((t) => ({
      id: t.id,
      gpuType: t.gpuType,
      gpuMemoryGiB: t.gpuMemoryGiB,
      allowedGpuCounts: t.allowedGpuCounts,
      available: t.available,
    })),
  });
  routes.add(
    {
      method: 'get',
      path: '/api/hardware',
      tag: 'endpoints',
      auth: { scopes: ['inference', 'compute', 'global'], session: 'manage' },
      summary: 'Instance types: GPU type id, GPU memory, allowed GPU counts, availability',
      responses: {
        200: { description: 'The catalog', schema: z.object({ data: z.array(hardwareView) }) },
        401: { description: 'No valid key', schema: simpleError },
      },
    },
    ({ res }) => {
      res.type('application/json').send(body);
    },
  );
}
