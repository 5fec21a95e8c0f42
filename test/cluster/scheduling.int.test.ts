// Deployments go through the real controller-manager and scheduler onto kwok's fake GPU nodes.
import { isIP } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually.ts';
import { isLocalCluster, kubectlJson, kubectlOk, testNamespace } from './env.ts';
import { condition, deployment, type Pod } from './manifests.ts';

interface NodeObj {
  metadata: { labels: Record<string, string> };
  status: { capacity: Record<string, string> };
}

describe('scheduling on fake GPU nodes', () => {
  let ns: Awaited<ReturnType<typeof testNamespace>>;
  beforeEach(async () => {
    ns = await testNamespace('sched');
  });
  afterEach(async () => {
    await ns.remove();
  });

  const apply = (obj: object) =>
    kubectlOk(['apply', '-f', '-'], { input: JSON.stringify(obj), namespace: ns.name });
  const pods = async (app: string) =>
    (await kubectlJson<{ items: Pod[] }>(['get', 'pods', '-l', `app=${app}`], { namespace: ns.name })).items;

  it('runs a Deployment requesting one GPU on a GPU node, with a loopback pod IP', async () => {
    await apply(deployment('gpu-one', { gpus: 1, replicas: 2 }));
    const running = await eventually(
      async () => {
        const ps = await pods('gpu-one');
        expect(ps).toHaveLength(2);
        for (const p of ps) {
          expect(p.status.phase).toBe('Running');
          expect(condition(p, 'Ready')?.status).toBe('True');
        }
        return ps;
      },
      { timeout: 30_000, description: 'two Running, Ready pods' },
    );
    for (const p of running) {
      const node = await kubectlJson<NodeObj>(['get', 'node', p.spec.nodeName ?? '']);
      expect(Number(node.status.capacity['nvidia.com/gpu'])).toBeGreaterThanOrEqual(1);
      expect(node.metadata.labels['berth.dev/gpu-type']).toBeTruthy();
      expect(isIP(p.status.podIP ?? '')).toBe(4);
      // Locally, pod IPs come from 127.16.0.0/16 so a process on this machine can serve a pod's traffic.
      if (isLocalCluster()) expect(p.status.podIP).toMatch(/^127\.16\.\d+\.\d+$/);
    }
    expect(new Set(running.map((p) => p.status.podIP)).size).toBe(2);
  });

  it('honours a GPU-type node selector', async () => {
    await apply(deployment('gpu-l4', { gpus: 4, nodeSelector: { 'berth.dev/gpu-type': 'nvidia-l4-24gb' } }));
    const [pod] = await eventually(
      async () => {
        const ps = await pods('gpu-l4');
        expect(ps[0]?.status.phase).toBe('Running');
        return ps;
      },
      { timeout: 30_000, description: 'pod Running' },
    );
    const node = await kubectlJson<NodeObj>(['get', 'node', pod?.spec.nodeName ?? '']);
    expect(node.metadata.labels['berth.dev/gpu-type']).toBe('nvidia-l4-24gb');
  });

  it('leaves a pod asking for more GPUs than any node has Pending and Unschedulable', async () => {
    await apply(deployment('gpu-too-many', { gpus: 16 }));
    await eventually(
      async () => {
        const [p] = await pods('gpu-too-many');
        expect(p?.status.phase).toBe('Pending');
        const scheduled = p && condition(p, 'PodScheduled');
        expect(scheduled?.status).toBe('False');
        expect(scheduled?.reason).toBe('Unschedulable');
        expect(scheduled?.message).toMatch(/nvidia\.com\/gpu/);
        expect(p?.spec.nodeName).toBeUndefined();
      },
      { timeout: 30_000, description: 'PodScheduled=False/Unschedulable' },
    );
  });

  it('garbage-collects the ReplicaSet and pods of a deleted Deployment', async () => {
    await apply(deployment('gc-me', { replicas: 3 }));
    await eventually(
      async () => {
        const ps = await pods('gc-me');
        expect(ps.filter((p) => p.status.phase === 'Running')).toHaveLength(3);
      },
      { timeout: 30_000, description: 'three Running pods' },
    );
    await kubectlOk(['delete', 'deployment', 'gc-me', '--wait=false'], { namespace: ns.name });
    await eventually(
      async () => {
        expect(await pods('gc-me')).toHaveLength(0);
        const rs = await kubectlJson<{ items: unknown[] }>(['get', 'replicasets', '-l', 'app=gc-me'], {
          namespace: ns.name,
        });
        expect(rs.items).toHaveLength(0);
      },
      { timeout: 45_000, description: 'ReplicaSet and pods gone' },
    );
  });
});
