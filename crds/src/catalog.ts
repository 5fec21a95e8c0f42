import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { LABEL_GPU_TYPE } from './constants.ts';

const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

/**
 * A non-negative decimal amount of money as users write it ("2.50", "0.000125"): at most 12 integer
 * digits and 6 decimals (micro-units). The API's billing/money.ts parses it into integer units.
 */
export const DECIMAL_AMOUNT = /^(\d{1,12})(?:\.(\d{1,6}))?$/;

export const InstanceTypeSchema = z
  .object({
    id: z
      .string()
      .regex(
        /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/,
        'id must be lowercase letters, digits and dashes, e.g. nvidia-h100-80gb',
      )
      .max(63)
      .describe('Instance type id, the value of spec.hardware.gpuType'),
    gpuType: z.string().min(1).describe('GPU product label shown to users, e.g. "NVIDIA H100 80GB"'),
    gpuMemoryGiB: z.number().positive().describe('Memory of ONE GPU in GiB'),
    allowedGpuCounts: z
      .array(z.int().min(1).max(64))
      .min(1, 'allowedGpuCounts needs at least one count, e.g. [1, 2, 4, 8]')
      .refine((c) => new Set(c).size === c.length, 'allowedGpuCounts has duplicates'),
    resourceName: z
      .string()
      .min(1)
      .default('nvidia.com/gpu')
      .describe('Extended resource the GPUs are requested as'),
    nodeSelector: z
      .record(z.string(), z.string().regex(LABEL_VALUE, 'nodeSelector values must be valid label values'))
      .optional()
      .describe(`Node labels; defaults to { "${LABEL_GPU_TYPE}": <id> }`),
    available: z.boolean().default(true).describe('Offered for new endpoints'),
    pricePerGpuHour: z
      .string()
      .regex(DECIMAL_AMOUNT, 'pricePerGpuHour must be a decimal string with at most 6 decimals, e.g. "2.50"')
      .optional()
      .describe(
        'Price of one GPU for one hour in the billing currency: dedicated GPU time is invoiced at it (unset: 0)',
      ),
  })
  .transform((t) => ({
    ...t,
    allowedGpuCounts: [...t.allowedGpuCounts].sort((a, b) => a - b),
    nodeSelector: t.nodeSelector ?? { [LABEL_GPU_TYPE]: t.id },
  }));

export type InstanceType = z.output<typeof InstanceTypeSchema>;

export const CatalogSchema = z
  .object({
    instanceTypes: z.array(InstanceTypeSchema).min(1, 'the catalog needs at least one instance type'),
  })
  .superRefine((c, ctx) => {
    const seen = new Set<string>();
    c.instanceTypes.forEach((t, i) => {
      if (seen.has(t.id))
        ctx.addIssue({ code: 'custom', path: ['instanceTypes', i, 'id'], message: `duplicate id ${t.id}` });
      seen.add(t.id);
    });
  });

export type Catalog = z.output<typeof CatalogSchema>;

export const DEFAULT_CATALOG: Catalog = CatalogSchema.parse({
  instanceTypes: [
    // Prices are examples to replace with your own (BERTH_CATALOG_FILE).
    {
      id: 'nvidia-h100-80gb',
      gpuType: 'NVIDIA H100 80GB',
      gpuMemoryGiB: 80,
      allowedGpuCounts: [1, 2, 4, 8],
      pricePerGpuHour: '2.50',
    },
    {
      id: 'nvidia-a100-80gb',
      gpuType: 'NVIDIA A100 80GB',
      gpuMemoryGiB: 80,
      allowedGpuCounts: [1, 2, 4, 8],
      pricePerGpuHour: '1.60',
    },
    {
      id: 'nvidia-l4-24gb',
      gpuType: 'NVIDIA L4 24GB',
      gpuMemoryGiB: 24,
      allowedGpuCounts: [1, 2, 4],
      pricePerGpuHour: '0.80',
    },
  ],
});

export class CatalogError extends Error {
  override name = 'CatalogError';
}

/** Parse a catalog document (already decoded JSON/YAML); errors list every field to fix. */
export function parseCatalog(doc: unknown, source = 'catalog'): Catalog {
  const r = CatalogSchema.safeParse(doc);
  if (r.success) return r.data;
  const lines = r.error.issues.map((i) => `  ${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`);
  throw new CatalogError(`${source} is not a valid instance-type catalog; fix:\n${lines.join('\n')}`);
}

/** Load the catalog from a JSON or YAML file (env BERTH_CATALOG_FILE), or the default when no file is named. */
export function loadCatalog(file: string | undefined = process.env.BERTH_CATALOG_FILE): Catalog {
  if (!file) return DEFAULT_CATALOG;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new CatalogError(`BERTH_CATALOG_FILE=${file} cannot be read: ${(err as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text); // YAML is a superset of JSON
  } catch (err) {
    throw new CatalogError(`BERTH_CATALOG_FILE=${file} is not valid JSON or YAML: ${(err as Error).message}`);
  }
  return parseCatalog(doc, `BERTH_CATALOG_FILE=${file}`);
}

export function findInstanceType(catalog: Catalog, id: string): InstanceType | undefined {
  return catalog.instanceTypes.find((t) => t.id === id);
}

/** Hardware check shared by the API (before it writes a resource) and the operator (backstop). */
export function checkHardware(
  catalog: Catalog,
  hw: { gpuType: string; gpuCount: number },
): { ok: true; instanceType: InstanceType } | { ok: false; field: string; message: string } {
  const t = findInstanceType(catalog, hw.gpuType);
  if (!t) {
    const ids = catalog.instanceTypes.map((x) => x.id).join(', ');
    return {
      ok: false,
      field: 'spec.hardware.gpuType',
      message: `unknown GPU type "${hw.gpuType}"; one of: ${ids}`,
    };
  }
  if (!t.allowedGpuCounts.includes(hw.gpuCount)) {
    return {
      ok: false,
      field: 'spec.hardware.gpuCount',
      message: `gpuCount ${hw.gpuCount} is not offered for ${t.id}; one of: ${t.allowedGpuCounts.join(', ')}`,
    };
  }
  return { ok: true, instanceType: t };
}
