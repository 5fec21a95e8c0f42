import { z } from 'zod';
import type { Catalog } from '@berth/crds';
import { formatAmount, parseAmount } from '../platform/money.ts';
import type { Routes } from '../http/routes.ts';
import { simpleError } from '../http/openapi.ts';

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
  pricePerGpuHour: z
    .string()
    .describe(
      'What one GPU costs for one hour: the rate GPU time is invoiced at (`ratePerGpuHour` of invoice lines), a decimal string with six decimals, e.g. "0.800000"; "0.000000" when the catalog names no price',
    ),
  currency: z
    .string()
    .optional()
    .describe('The currency of the price, balances and invoices (BERTH_CURRENCY), e.g. "USD"'),
});

type HardwareView = z.infer<typeof hardwareView>;

function view(catalog: Catalog, currency: string | undefined): { data: HardwareView[] } {
  return {
    data: catalog.instanceTypes.map((t) => ({
      id: t.id,
      displayName: t.gpuType,
      gpuType: t.gpuType,
      gpuMemoryGiB: t.gpuMemoryGiB,
      allowedGpuCounts: t.allowedGpuCounts,
      available: t.available,
      // As billing/metering.ts rates GPU time: the catalog's price, 0 when it names none.
      pricePerGpuHour: formatAmount(parseAmount(t.pricePerGpuHour ?? '0') ?? 0n),
      ...(currency ? { currency } : {}),
    })),
  };
}

/**
 * GET /api/hardware: the instance types endpoints can be provisioned on, with the price GPU time is
 * invoiced at. Any valid key. The answer never changes; it is made on the first request (the
 * dependencies are not read while routes are declared).
 */
export function registerHardwareRoutes(routes: Routes, deps: { catalog: Catalog; currency?: string }): void {
  let body: string | undefined;
  routes.add(
    {
      method: 'get',
      path: '/api/hardware',
      tag: 'endpoints',
      auth: { scopes: ['inference', 'compute', 'global'], session: 'manage' },
      summary:
        'Instance types: `id` (what `hardware.gpuType` takes), display name, GPU memory, allowed GPU counts, availability, price per GPU-hour',
      responses: {
        200: { description: 'The catalog', schema: z.object({ data: z.array(hardwareView) }) },
        401: { description: 'No valid key', schema: simpleError },
      },
    },
    ({ res }) => {
      body ??= JSON.stringify(view(deps.catalog, deps.currency));
      res.type('application/json').send(body);
    },
  );
}
