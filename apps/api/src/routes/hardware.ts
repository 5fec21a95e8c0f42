import { z } from 'zod';
import type { Catalog } from '@berth/crds';
import type { Routes } from '../http/routes.ts';
import { simpleError } from '../openapi.ts';

const hardwareView = z.object({
  id: z.string().describe('What requests take: the value of `hardware.gpuType` in POST /api/endpoints'),
  displayName: z.string().describe('The GPU product as shown to people, e.g. "NVIDIA L4 24GB"'),
  gpuType: z
    .string()
    .meta({ deprecated: true })
    .describe('Deprecated: the same as `displayName` (kept for clients written before it); send `id`'),
  gpuMemoryGiB: z.number().describe('Memory of one GPU'),
  allowedGpuCounts: z.array(z.number()),
  available: z.boolean(),
});

/** GET /api/hardware: the instance types endpoints can be provisioned on. Any valid key. */
export function registerHardwareRoutes(routes: Routes, deps: { catalog: Catalog }): void {
  const body = JSON.stringify({
    data: deps.catalog.instanceTypes.map((t) => ({
      id: t.id,
      displayName: t.gpuType,
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
      summary:
        'Instance types: `id` (what `hardware.gpuType` takes), display name, GPU memory, allowed GPU counts, availability',
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
