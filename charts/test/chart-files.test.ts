// The chart's copies of generated or shared data must not drift from their sources.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEFAULT_CATALOG, parseCatalog } from '@berth/crds';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const chart = join(root, 'charts', 'berth');
const read = (p: string) => readFileSync(p, 'utf8');

describe('charts/berth files', () => {
  it('crds/ is byte-identical to crds/generated (run: cp crds/generated/*.yaml charts/berth/crds/)', () => {
    const generated = read(join(root, 'crds', 'generated', 'berth.dev_dedicatedendpoints.yaml'));
    const inChart = read(join(chart, 'crds', 'berth.dev_dedicatedendpoints.yaml'));
    expect(inChart).toBe(generated);
  });

  it("values.yaml's catalog is the built-in catalog the CRD is generated from", () => {
    const values = parse(read(join(chart, 'values.yaml'))) as { catalog: unknown };
    expect(parseCatalog(values.catalog, 'values.yaml')).toEqual(DEFAULT_CATALOG);
  });

  it("every profile's catalog is valid and uses only instance-type ids the shipped CRD accepts", () => {
    const crd = parse(read(join(chart, 'crds', 'berth.dev_dedicatedendpoints.yaml'))) as {
      spec: { versions: { schema: { openAPIV3Schema: unknown } }[] };
    };
    const schema = crd.spec.versions[0]!.schema.openAPIV3Schema as {
      properties: { spec: { properties: { hardware: { properties: { gpuType: { enum: string[] } } } } } };
    };
    const accepted = schema.properties.spec.properties.hardware.properties.gpuType.enum;
    for (const file of ['values.yaml', 'values-cpu-only.yaml']) {
      const values = parse(read(join(chart, file))) as { catalog?: unknown };
      if (!values.catalog) continue;
      const catalog = parseCatalog(values.catalog, file);
      for (const t of catalog.instanceTypes) expect(accepted, `${file}: ${t.id}`).toContain(t.id);
    }
  });

  it('values.schema.json is valid JSON that forbids unknown top-level keys', () => {
    const schema = JSON.parse(read(join(chart, 'values.schema.json'))) as { additionalProperties: boolean };
    expect(schema.additionalProperties).toBe(false);
  });
});
