// GPU time billed against the pods' lifetimes in the cluster (issue 32), on the real control plane
// (kwok GPU nodes, the operator, the scheduler, real time): an endpoint up on one replica, scaled to
// two, back to one, hibernated when idle, woken by a call, terminated. The test watches the engine
// pods itself (when each was on a node — on its own clock, and by the cluster's PodScheduled time —
// and when it was gone) and compares their sum with the GPU intervals the meter wrote. Printed for
// BENCHMARKS.md.
import { Watch, type V1Pod } from '@kubernetes/client-node';
import { LABEL_ENDPOINT } from '@berth/crds';
import { describe, expect, it } from 'vitest';
import { loadKubeConfig } from '../../cluster/env.ts';
import { eventually } from '../../support/eventually.ts';
import { sql } from '../../support/postgres.ts';
import { acct, api, ns, patchSpec, provision, sdk, useDedicatedEndpoints, waitStatus } from './fixture.ts';

useDedicatedEndpoints({ BILLING_GPU_SYNC_INTERVAL_MS: '1000' });

interface PodLife {
  /** The cluster's PodScheduled time, and the test's clock when it first saw the pod on a node. */
  scheduled?: number;
  seenBound?: number;
  /** The test's clock when the pod was gone (the cluster keeps no timestamp of that). */
  gone?: number;
}

/** Watches the endpoint's pods; `stop()` ends the watch. */
async function watchPods(id: string) {
  const lives = new Map<string, PodLife>();
  const req = await new Watch(loadKubeConfig()).watch(
    `/api/v1/namespaces/${ns.name}/pods`,
    { labelSelector: `${LABEL_ENDPOINT}=${id}` },
    (type: string, pod: V1Pod) => {
      const now = Date.now();
      const uid = pod.metadata!.uid!;
      const life = lives.get(uid) ?? {};
      const scheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'True');
      if (pod.spec?.nodeName) life.seenBound ??= now;
      if (scheduled?.lastTransitionTime) life.scheduled ??= new Date(scheduled.lastTransitionTime).getTime();
      if (type === 'DELETED') life.gone ??= now;
      lives.set(uid, life);
    },
    () => {},
  );
  return { lives, stop: () => req.abort() };
}

describe('GPU time against the pods in the cluster', () => {
  it('up, scaled to two, back to one, hibernated, woken, terminated: billed = the pods’ lifetimes', async () => {
    const { status, body } = await provision({
      model: 'org/small',
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      scaling: { minReplicas: 1, maxReplicas: 2, idleTimeoutSeconds: 15 },
    });
    expect(status).toBe(201);
    const id = body.id as string;
    const pods = await watchPods(id);
    try {
      await waitStatus(id, 'up', 90_000);
      await patchSpec(id, { scaling: { minReplicas: 2, maxReplicas: 2, idleTimeoutSeconds: 15 } });
      await eventually(
        async () => [...pods.lives.values()].filter((l) => l.seenBound && !l.gone).length === 2,
        {
          timeout: 60_000,
        },
      );
      await new Promise((r) => setTimeout(r, 3_000));
      await patchSpec(id, { scaling: { minReplicas: 0, maxReplicas: 2, idleTimeoutSeconds: 15 } });
      await waitStatus(id, 'hibernated', 120_000);
      const answer = await sdk(id, acct.inference, { timeout: 120_000 }).chat.completions.create({
        model: 'org/small',
        messages: [{ role: 'user', content: 'wake up' }],
        max_tokens: 4,
      });
      expect(answer.choices[0]!.message.content).toBeTruthy();
      await new Promise((r) => setTimeout(r, 2_000));
      const del = await fetch(`${api.url}/api/endpoints/${id}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${acct.global}` },
      });
      expect(del.status).toBeLessThan(300);
      await eventually(async () => [...pods.lives.values()].every((l) => l.gone), { timeout: 90_000 });
      await eventually(
        async () =>
          (
            await sql(
              api.db.url,
              'SELECT 1 FROM gpu_meters WHERE endpoint_id = $1 AND terminated_at IS NOT NULL',
              [id],
            )
          ).length === 1,
        { timeout: 60_000 },
      );
    } finally {
      pods.stop();
    }
    const [billed] = await sql<{ ms: string; intervals: number }>(
      api.db.url,
      `SELECT COALESCE(sum(replicas * gpus_per_replica * extract(epoch FROM (ended_at - started_at)) * 1000), 0)::text AS ms,
         count(*)::int AS intervals FROM gpu_intervals WHERE endpoint_id = $1`,
      [id],
    );
    const lives = [...pods.lives.values()].filter((l) => l.seenBound !== undefined);
    const watched = lives.reduce((s, l) => s + (l.gone! - l.seenBound!), 0);
    // From the cluster's PodScheduled times (whole seconds) to the pods' deletion as watched.
    const cluster = lives.reduce((s, l) => s + (l.gone! - (l.scheduled ?? l.seenBound!)), 0);
    const billedMs = Number(billed!.ms);
    const report = {
      pods: lives.length,
      intervals: billed!.intervals,
      billedSeconds: billedMs / 1000,
      watchedSeconds: watched / 1000,
      clusterSeconds: cluster / 1000,
      billedMinusWatched: (billedMs - watched) / 1000,
      billedMinusCluster: (billedMs - cluster) / 1000,
    };
    console.error('gpu time report', JSON.stringify(report));
    expect(lives.length).toBe(3);
    // Each pod's start and end are observed separately by the meter and by this watch (a second
    // apart at most); the cluster's timestamps have a second's precision.
    expect(Math.abs(billedMs - watched)).toBeLessThanOrEqual(lives.length * 2 * 1_000);
    expect(Math.abs(billedMs - cluster)).toBeLessThanOrEqual(lives.length * 2 * 1_000);
  }, 420_000);
});
