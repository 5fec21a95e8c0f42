// The local control plane answers like a real one: version, fake GPU nodes, CRDs with status.
import {
  ApiextensionsV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually.ts';
import { kubectl, kubectlJson, kubectlOk, loadKubeConfig, testNamespace } from './env.ts';

interface NodeList {
  items: {
    metadata: { name: string; labels: Record<string, string> };
    status: { capacity: Record<string, string>; conditions: { type: string; status: string }[] };
  }[];
}

describe('control plane', () => {
  it('answers kubectl version with a server version', async () => {
    const r = await kubectl(['version', '-o', 'json']);
    expect(r.code, r.stderr).toBe(0);
    const v = JSON.parse(r.stdout) as { serverVersion?: { gitVersion: string; major: string } };
    expect(v.serverVersion?.major).toBe('1');
    expect(v.serverVersion?.gitVersion).toMatch(/^v1\.\d+\.\d+/);
  });

  it('lists Ready GPU nodes of both pools and a CPU-only node', async () => {
    const nodes = await kubectlJson<NodeList>(['get', 'nodes']);
    const ready = nodes.items.filter((n) =>
      n.status.conditions.some((c) => c.type === 'Ready' && c.status === 'True'),
    );
    const pool = (type: string) => ready.filter((n) => n.metadata.labels['berth.dev/gpu-type'] === type);

    const h100 = pool('nvidia-h100-80gb');
    expect(h100.length).toBeGreaterThanOrEqual(1);
    for (const n of h100) {
      expect(n.status.capacity['nvidia.com/gpu']).toBe('8');
      expect(n.metadata.labels['nvidia.com/gpu.product']).toMatch(/H100/);
    }
    const l4 = pool('nvidia-l4-24gb');
    expect(l4.length).toBeGreaterThanOrEqual(1);
    for (const n of l4) expect(n.status.capacity['nvidia.com/gpu']).toBe('4');

    const cpuOnly = ready.filter((n) => !n.status.capacity['nvidia.com/gpu']);
    expect(cpuOnly.length).toBeGreaterThanOrEqual(1);

    const table = await kubectlOk(['get', 'nodes', '-l', 'berth.dev/gpu-type', '--no-headers']);
    expect(table).toMatch(/\sReady\s/);
  });
});

describe('custom resources', () => {
  const group = 'clustertest.berth.dev';
  let ns: Awaited<ReturnType<typeof testNamespace>>;
  // A CRD is cluster-scoped: a per-test plural keeps parallel runs apart.
  let plural: string;

  beforeEach(async () => {
    ns = await testNamespace('crd');
    plural = `widgets${Date.now().toString(36)}`;
  });
  afterEach(async () => {
    await ns.remove();
    await kubectl(['delete', 'crd', `${plural}.${group}`, '--ignore-not-found', '--wait=false']);
  });

  it('serves a CRD, its custom resources and their status subresource', async () => {
    const crd = {
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: `${plural}.${group}` },
      spec: {
        group,
        scope: 'Namespaced',
        names: { plural, singular: plural.slice(0, -1), kind: 'Widget', listKind: 'WidgetList' },
        versions: [
          {
            name: 'v1',
            served: true,
            storage: true,
            subresources: { status: {} },
            schema: {
              openAPIV3Schema: {
                type: 'object',
                properties: {
                  spec: { type: 'object', properties: { size: { type: 'integer' } } },
                  status: { type: 'object', properties: { phase: { type: 'string' } } },
                },
              },
            },
          },
        ],
      },
    };
    await kubectlOk(['apply', '-f', '-'], { input: JSON.stringify(crd) });
    const kc = loadKubeConfig();
    const ext = kc.makeApiClient(ApiextensionsV1Api);
    await eventually(
      async () => {
        const c = await ext.readCustomResourceDefinition({ name: `${plural}.${group}` });
        expect(c.status?.conditions?.find((x) => x.type === 'Established')?.status).toBe('True');
      },
      { timeout: 30_000, description: 'CRD established' },
    );

    const cr = { apiVersion: `${group}/v1`, kind: 'Widget', metadata: { name: 'w1' }, spec: { size: 3 } };
    await eventually(
      () => kubectlOk(['apply', '-f', '-'], { input: JSON.stringify(cr), namespace: ns.name }),
      {
        timeout: 15_000,
        description: 'custom resource created',
      },
    );

    // Status goes through /status only: a status change sent to the main resource is ignored...
    await kubectlOk(['patch', plural, 'w1', '--type=merge', '-p', '{"status":{"phase":"ignored"}}'], {
      namespace: ns.name,
    });
    type Widget = { spec: { size: number }; status?: { phase?: string } };
    const before = await kubectlJson<Widget>(['get', plural, 'w1'], { namespace: ns.name });
    expect(before.status?.phase).toBeUndefined();
    // ...and one sent to the subresource sticks, as the operator will write it.
    const objects = kc.makeApiClient(CustomObjectsApi);
    await objects.patchNamespacedCustomObjectStatus(
      { group, version: 'v1', namespace: ns.name, plural, name: 'w1', body: { status: { phase: 'up' } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );

    const got = await kubectlJson<Widget>(['get', plural, 'w1'], { namespace: ns.name });
    expect(got.spec.size).toBe(3);
    expect(got.status?.phase).toBe('up');
  });
});
