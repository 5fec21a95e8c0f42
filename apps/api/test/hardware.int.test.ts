// GET /api/hardware on the real API (real PostgreSQL, billing on): each instance type with the price
// one GPU-hour is invoiced at, as invoice lines write a rate (six decimals), and the billing currency.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';

let dir: string;
let api: TestApi;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'berth-hardware-'));
  const catalog = path.join(dir, 'catalog.yaml');
  writeFileSync(
    catalog,
    `instanceTypes:
  - { id: gpu-priced, gpuType: Priced GPU, gpuMemoryGiB: 24, allowedGpuCounts: [1, 2], pricePerGpuHour: "2.5" }
  - { id: gpu-unpriced, gpuType: Unpriced GPU, gpuMemoryGiB: 80, allowedGpuCounts: [1] }
`,
  );
  api = await startTestApi({ BERTH_CATALOG_FILE: catalog, BERTH_CURRENCY: 'EUR' });
});
afterAll(async () => {
  await api?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('GET /api/hardware', () => {
  it('gives each instance type its price per GPU-hour (0 when the catalog names none) and the currency', async () => {
    const acct = await api.newAccount();
    const res = await fetch(`${api.url}/api/hardware`, { headers: bearer(acct.compute) });
    expect(res.status).toBe(200);
    const { data } = (await res.json()) as { data: Record<string, unknown>[] };
    expect(data.map((h) => [h.id, h.pricePerGpuHour, h.currency])).toEqual([
      ['gpu-priced', '2.500000', 'EUR'],
      ['gpu-unpriced', '0.000000', 'EUR'],
    ]);
  });
});

describe('GET /api/hardware with the built-in catalog', () => {
  let builtIn: TestApi;
  beforeAll(async () => {
    builtIn = await startTestApi();
  });
  afterAll(async () => builtIn?.stop());

  it('gives each item the id requests take and a display name (gpuType kept, deprecated)', async () => {
    const base = builtIn.url;
    const key = (await builtIn.newAccount()).inference;
    const res = await fetch(`${base}/api/hardware`, { headers: { authorization: `Bearer ${key}` } });
    const { data } = await res.json();
    expect(data).toContainEqual(
      expect.objectContaining({
        id: 'nvidia-l4-24gb',
        displayName: 'NVIDIA L4 24GB',
        gpuType: 'NVIDIA L4 24GB',
      }),
    );
    const doc = await (await fetch(`${base}/openapi.json`)).json();
    const item = doc.paths['/api/hardware'].get.responses['200'].content['application/json'].schema;
    expect(JSON.stringify(item)).toContain('"deprecated":true');
  });
});
