import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkHardware, DEFAULT_CATALOG, loadCatalog, parseCatalog } from '../src/index.ts';

describe('catalog', () => {
  it('has sensible defaults with a nodeSelector per type', () => {
    const h100 = DEFAULT_CATALOG.instanceTypes.find((t) => t.id === 'nvidia-h100-80gb');
    expect(h100).toMatchObject({
      allowedGpuCounts: [1, 2, 4, 8],
      resourceName: 'nvidia.com/gpu',
      nodeSelector: { 'berth.dev/gpu-type': 'nvidia-h100-80gb' },
      available: true,
    });
  });

  it('loads YAML and JSON files named by BERTH_CATALOG_FILE', () => {
    const dir = mkdtempSync(join(tmpdir(), 'catalog-'));
    const yamlFile = join(dir, 'c.yaml');
    writeFileSync(
      yamlFile,
      'instanceTypes:\n  - id: amd-mi300x\n    gpuType: AMD MI300X\n    gpuMemoryGiB: 192\n    allowedGpuCounts: [8, 1]\n    resourceName: amd.com/gpu\n',
    );
    const c = loadCatalog(yamlFile);
    expect(c.instanceTypes[0]).toMatchObject({
      id: 'amd-mi300x',
      allowedGpuCounts: [1, 8],
      resourceName: 'amd.com/gpu',
    });
    const jsonFile = join(dir, 'c.json');
    writeFileSync(
      jsonFile,
      JSON.stringify({ instanceTypes: [{ id: 'a', gpuType: 'A', gpuMemoryGiB: 1, allowedGpuCounts: [1] }] }),
    );
    expect(loadCatalog(jsonFile).instanceTypes).toHaveLength(1);
  });

  it('says which field to fix', () => {
    expect(() =>
      parseCatalog(
        { instanceTypes: [{ id: 'Bad Id', gpuType: 'x', gpuMemoryGiB: -1, allowedGpuCounts: [] }] },
        'test',
      ),
    ).toThrowError(
      /instanceTypes\.0\.id: id must be lowercase[\s\S]*instanceTypes\.0\.gpuMemoryGiB[\s\S]*allowedGpuCounts needs/,
    );
    expect(() =>
      parseCatalog({
        instanceTypes: [
          { id: 'a', gpuType: 'A', gpuMemoryGiB: 1, allowedGpuCounts: [1] },
          { id: 'a', gpuType: 'A', gpuMemoryGiB: 1, allowedGpuCounts: [1] },
        ],
      }),
    ).toThrowError(/duplicate id a/);
    expect(() => loadCatalog('/nonexistent/catalog.yaml')).toThrowError(
      /BERTH_CATALOG_FILE=\/nonexistent\/catalog.yaml cannot be read/,
    );
  });

  it('checks hardware against the catalog', () => {
    expect(checkHardware(DEFAULT_CATALOG, { gpuType: 'nvidia-l4-24gb', gpuCount: 8 })).toMatchObject({
      ok: false,
      field: 'spec.hardware.gpuCount',
    });
    expect(checkHardware(DEFAULT_CATALOG, { gpuType: 'tpu', gpuCount: 1 })).toMatchObject({
      ok: false,
      field: 'spec.hardware.gpuType',
    });
    expect(checkHardware(DEFAULT_CATALOG, { gpuType: 'nvidia-l4-24gb', gpuCount: 4 }).ok).toBe(true);
  });
});
