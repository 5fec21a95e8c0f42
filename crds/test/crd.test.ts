import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { buildCrd, DedicatedEndpointSpecSchema, renderCrdYaml } from '../src/index.ts';

const committed = new URL('../generated/berth.dev_dedicatedendpoints.yaml', import.meta.url);

describe('generated CRD', () => {
  it('is up to date with crds/src (run `npm run generate -w crds` if this fails)', () => {
    expect(readFileSync(committed, 'utf8')).toBe(renderCrdYaml());
  });

  it('is a structural schema: no $ref/anyOf, no additionalProperties:false', () => {
    const text = JSON.stringify(buildCrd());
    expect(text).not.toMatch(
      /"\$ref"|"anyOf"|"oneOf"|"\$schema"|"additionalProperties":false|"propertyNames"/,
    );
  });

  it('keys status.conditions by type so SSA merges per condition', () => {
    const crd = buildCrd() as any; // eslint-disable-line @typescript-eslint/no-explicit-any
    const conditions = crd.spec.versions[0].schema.openAPIV3Schema.properties.status.properties.conditions;
    expect(conditions['x-kubernetes-list-type']).toBe('map');
    expect(conditions['x-kubernetes-list-map-keys']).toEqual(['type']);
  });

  it('bakes the catalog into gpuType enum and one CEL rule per instance type', () => {
    const crd = buildCrd({
      instanceTypes: [
        {
          id: 'x-1',
          gpuType: 'X',
          gpuMemoryGiB: 1,
          allowedGpuCounts: [1, 3],
          resourceName: 'r',
          nodeSelector: {},
          available: true,
        },
      ],
    }) as any; // eslint-disable-line @typescript-eslint/no-explicit-any
    const hw = crd.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.hardware;
    expect(hw.properties.gpuType.enum).toEqual(['x-1']);
    expect(hw['x-kubernetes-validations']).toEqual([
      expect.objectContaining({ rule: "self.gpuType != 'x-1' || self.gpuCount in [1, 3]" }),
    ]);
  });
});

describe('DedicatedEndpointSpecSchema', () => {
  const base = {
    account: 'acct_1',
    model: { id: 'Qwen/Qwen2.5-0.5B' },
    hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
  };

  it('applies the same defaults as the CRD', () => {
    expect(DedicatedEndpointSpecSchema.parse(base)).toEqual({
      ...base,
      model: { id: 'Qwen/Qwen2.5-0.5B', revision: 'main' },
      authMode: 'Private',
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 900 },
    });
  });

  it('refuses min > max replicas naming the field', () => {
    const r = DedicatedEndpointSpecSchema.safeParse({ ...base, scaling: { minReplicas: 3, maxReplicas: 2 } });
    expect(r.success).toBe(false);
    expect(r.error?.issues[0]?.path).toEqual(['scaling', 'minReplicas']);
  });

  it('refuses a bad model id and a bad auth mode', () => {
    expect(DedicatedEndpointSpecSchema.safeParse({ ...base, model: { id: 'a b' } }).success).toBe(false);
    expect(DedicatedEndpointSpecSchema.safeParse({ ...base, authMode: 'Open' }).success).toBe(false);
  });
});
