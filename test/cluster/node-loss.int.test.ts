// Node loss as on a real cluster: a node whose kubelet goes away turns NotReady, is tainted
// unreachable, and its pods are evicted and replaced. Uses a node of its own so the shared pools
// are never disturbed.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually.ts';
import { isLocalCluster, kubectl, kubectlJson, kubectlOk, testNamespace } from './env.ts';
import { deployment, type Pod } from './manifests.ts';

interface NodeObj {
  spec: { taints?: { key: string; effect: string }[] };
  status: { conditions: { type: string; status: string }[] };
}

describe('node loss', () => {
  let ns: Awaited<ReturnType<typeof testNamespace>>;
  let node: string;
  beforeEach(async () => {
    ns = await testNamespace('nodeloss');
    node = `lost-${ns.name}`.slice(0, 63);
  });
  afterEach(async () => {
    await kubectl(['delete', 'node', node, '--ignore-not-found', '--wait=false']);
    await ns.remove();
  });

  it(
    'sim.berth.dev/behavior=lost: NotReady, tainted unreachable, pods evicted and replaced',
    { timeout: 120_000 },
    async () => {
      const capacity = { cpu: '8', memory: '32Gi', pods: '110', 'nvidia.com/gpu': '1' };
      await kubectlOk(['apply', '-f', '-'], {
        input: JSON.stringify({
          apiVersion: 'v1',
          kind: 'Node',
          metadata: {
            name: node,
            annotations: { 'kwok.x-k8s.io/node': 'fake' },
            labels: {
              'kubernetes.io/hostname': node,
              'berth.dev/gpu-type': 'nvidia-test-1gb',
              'test.berth.dev/node': node,
            },
          },
          // Loopback pod IPs locally; elsewhere (kind) the cluster's own IPAM assigns the range.
          spec: isLocalCluster() ? { podCIDR: '127.16.250.0/24', podCIDRs: ['127.16.250.0/24'] } : {},
          status: { capacity, allocatable: capacity },
        }),
      });
      const readyStatus = async () =>
        (await kubectlJson<NodeObj>(['get', 'node', node])).status.conditions.find((c) => c.type === 'Ready')
          ?.status;
      await eventually(async () => expect(await readyStatus()).toBe('True'), { description: 'node Ready' });

      // An explicit 10 s unreachable toleration keeps the test quick on any cluster (the local one
      // defaults to 30 s, kind and most clusters to 300 s).
      const tolerations = [
        {
          key: 'node.kubernetes.io/unreachable',
          operator: 'Exists',
          effect: 'NoExecute',
          tolerationSeconds: 10,
        },
      ];
      await kubectlOk(['apply', '-f', '-'], {
        namespace: ns.name,
        input: JSON.stringify(
          deployment('on-lost', { gpus: 1, nodeSelector: { 'test.berth.dev/node': node }, tolerations }),
        ),
      });
      const pods = async () =>
        (await kubectlJson<{ items: Pod[] }>(['get', 'pods', '-l', 'app=on-lost'], { namespace: ns.name }))
          .items;
      const first = await eventually(
        async () => {
          const [p] = await pods();
          expect(p?.status.phase).toBe('Running');
          return p as Pod;
        },
        { description: 'pod Running on the node' },
      );

      await kubectlOk(['annotate', 'node', node, 'sim.berth.dev/behavior=lost']);
      await eventually(
        async () => {
          const n = await kubectlJson<NodeObj>(['get', 'node', node]);
          expect(n.status.conditions.find((c) => c.type === 'Ready')?.status).toBe('Unknown');
          expect(n.spec.taints?.map((t) => `${t.key}:${t.effect}`)).toContain(
            'node.kubernetes.io/unreachable:NoExecute',
          );
        },
        { timeout: 60_000, description: 'node NotReady and tainted unreachable' },
      );

      // Evicted once the 10 s toleration runs out; the replacement has nowhere to go.
      await eventually(
        async () => {
          const ps = await pods();
          expect(ps.map((p) => p.metadata.name)).not.toContain(first.metadata.name);
          expect(ps).toHaveLength(1);
          expect(ps[0]?.status.phase).toBe('Pending');
        },
        { timeout: 60_000, interval: 1_000, description: 'pod evicted and replaced by a Pending one' },
      );
    },
  );
});
