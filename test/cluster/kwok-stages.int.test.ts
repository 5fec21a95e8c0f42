// The sim.berth.dev/* pod annotations (kwok/stages.yaml) drive the failure paths the operator sees.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually.ts';
import { kubectlJson, kubectlOk, testNamespace } from './env.ts';
import { condition, deployment, type Pod } from './manifests.ts';

describe('kwok pod stages', () => {
  let ns: Awaited<ReturnType<typeof testNamespace>>;
  beforeEach(async () => {
    ns = await testNamespace('stages');
  });
  afterEach(async () => {
    await ns.remove();
  });

  const apply = (obj: object) =>
    kubectlOk(['apply', '-f', '-'], { input: JSON.stringify(obj), namespace: ns.name });
  const pod = async (app: string) => {
    const { items } = await kubectlJson<{ items: Pod[] }>(['get', 'pods', '-l', `app=${app}`], {
      namespace: ns.name,
    });
    expect(items).toHaveLength(1);
    return items[0] as Pod;
  };

  it('sim.berth.dev/ready-after: Running at once, Ready only after the delay', async () => {
    await apply(deployment('slow', { annotations: { 'sim.berth.dev/ready-after': '4s' } }));
    const started = await eventually(
      async () => {
        const p = await pod('slow');
        expect(p.status.phase).toBe('Running');
        expect(condition(p, 'Ready')?.status).toBe('False');
        return Date.parse(condition(p, 'Ready')?.lastTransitionTime ?? '');
      },
      { timeout: 30_000, description: 'Running, not Ready' },
    );
    const ready = await eventually(
      async () => {
        const p = await pod('slow');
        const c = condition(p, 'Ready');
        expect(c?.status).toBe('True');
        expect(p.status.containerStatuses?.[0]?.ready).toBe(true);
        return Date.parse(c?.lastTransitionTime ?? '');
      },
      { timeout: 30_000, description: 'Ready' },
    );
    // Condition timestamps have second precision.
    expect(ready - started).toBeGreaterThanOrEqual(3_000);
  });

  it('sim.berth.dev/behavior=crash-loop: restartCount grows, waiting reason CrashLoopBackOff', async () => {
    await apply(deployment('crasher', { annotations: { 'sim.berth.dev/behavior': 'crash-loop' } }));
    let sawBackOff = false;
    await eventually(
      async () => {
        const p = await pod('crasher');
        const cs = p.status.containerStatuses?.[0];
        if (cs?.state?.waiting?.reason === 'CrashLoopBackOff') sawBackOff = true;
        expect(p.status.phase).toBe('Running');
        expect(condition(p, 'Ready')?.status).toBe('False');
        expect(cs?.restartCount).toBeGreaterThanOrEqual(2);
        expect(sawBackOff).toBe(true);
      },
      { timeout: 45_000, interval: 200, description: 'restartCount >= 2 and CrashLoopBackOff seen' },
    );
  });

  it('sim.berth.dev/behavior=image-pull-error: Pending with ErrImagePull / ImagePullBackOff', async () => {
    await apply(deployment('no-image', { annotations: { 'sim.berth.dev/behavior': 'image-pull-error' } }));
    const reasons = new Set<string>();
    await eventually(
      async () => {
        const p = await pod('no-image');
        expect(p.status.phase).toBe('Pending');
        expect(condition(p, 'PodScheduled')?.status).toBe('True');
        const reason = p.status.containerStatuses?.[0]?.state?.waiting?.reason;
        if (reason) reasons.add(reason);
        expect([...reasons].sort()).toEqual(['ErrImagePull', 'ImagePullBackOff']);
      },
      { timeout: 45_000, interval: 200, description: 'ErrImagePull then ImagePullBackOff' },
    );
  });
});
