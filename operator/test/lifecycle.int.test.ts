import { ANNOTATION_LAST_ACTIVITY, ANNOTATION_WAKE_REQUESTED, FINALIZER, LABEL_ENDPOINT } from '@berth/crds';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testNamespace } from '@berth/test/cluster/env';
import { eventually } from '@berth/test/support/eventually';
import type { OperatorHandle } from '../src/operator.ts';
import { startFakeHub } from '@berth/test/support/fake-hub';
import { Cluster, installCrd, simSpec, start, testConfig } from '@berth/test/support/operator';

// One in-process operator against the real control plane (kwok nodes), watching its own namespace.
// Deadlines are short so the timeout paths run in seconds.

let ns: Awaited<ReturnType<typeof testNamespace>>;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let op: OperatorHandle;
let k: Cluster;

beforeAll(async () => {
  await installCrd();
  ns = await testNamespace('op-life');
  hub = await startFakeHub();
  k = new Cluster(ns.name);
  op = await start(testConfig(ns.name, hub.url, { provisioningTimeoutSeconds: 25, wakeTimeoutSeconds: 20 }));
});
afterAll(async () => {
  await op?.stop();
  await hub?.close();
  await k?.releaseAll();
  await ns?.remove();
});

describe('endpoint lifecycle', () => {
  it('building → up: Deployment, Service, owner references, finalizer, status, conditions, events', async () => {
    await k.create('endpt-basic', simSpec());
    const building = await k.waitPhase('endpt-basic', 'building', 20_000);
    expect(['Provisioning', 'CheckingModel']).toContain(building.status?.reason);

    const up = await k.waitPhase('endpt-basic', 'up', 40_000);
    expect(up.metadata.finalizers).toContain(FINALIZER);
    expect(up.status).toMatchObject({
      reason: 'ReplicaReady',
      readyReplicas: 1,
      observedGeneration: 1,
      preflightGeneration: 1,
      url: `http://endpt-basic.${ns.name}.svc:8000`,
    });
    // The start, stage by stage, in status and as a metric.
    const start = up.status?.lastStart;
    expect(start?.pod).toMatch(/^endpt-basic-/);
    expect(start!.totalSeconds).toBeCloseTo(
      start!.scheduledSeconds + start!.imageReadySeconds + start!.engineReadySeconds,
      2,
    );
    expect(start!.engineReadySeconds).toBeGreaterThanOrEqual(1); // ready-after 2s, from the container's start
    const metrics = await (await fetch(`http://127.0.0.1:${op.metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/berth_operator_replica_start_seconds_count\{stage="engine_ready"\} [1-9]/);
    expect(up.status?.conditions?.find((c) => c.type === 'Ready')).toMatchObject({
      status: 'True',
      observedGeneration: 1,
    });

    const dep = await k.deployment('endpt-basic');
    expect(dep?.metadata?.ownerReferences?.[0]).toMatchObject({
      kind: 'DedicatedEndpoint',
      name: 'endpt-basic',
      controller: true,
    });
    expect(dep?.spec?.replicas).toBe(1);
    const c = dep!.spec!.template.spec!.containers[0]!;
    expect(c.args?.slice(0, 4)).toEqual(['--model', 'org/small', '--served-model-name', 'org/small']);
    expect(c.resources?.limits?.['nvidia.com/gpu']).toBe('1');
    expect(dep?.metadata?.managedFields?.map((f) => f.manager)).toContain('berth-operator');
    const svc = await k.core.readNamespacedService({ name: 'endpt-basic', namespace: ns.name });
    expect(svc.spec?.selector).toEqual({ [LABEL_ENDPOINT]: 'endpt-basic' });

    await eventually(async () =>
      expect(await k.eventReasons('endpt-basic')).toEqual(expect.arrayContaining(['ReplicaReady'])),
    );
  }, 90_000);

  it('up → hibernated after idle → waking on the wake annotation → up, weights cache kept', async () => {
    await k.create('endpt-sleepy', { ...simSpec(), scaling: { idleTimeoutSeconds: 15 } });
    await k.waitPhase('endpt-sleepy', 'up', 40_000);
    // Traffic keeps it up: refresh the activity annotation as the API does while requests are in flight.
    for (let i = 0; i < 4; i++) {
      await k.mergePatch('endpt-sleepy', {
        metadata: { annotations: { [ANNOTATION_LAST_ACTIVITY]: new Date().toISOString() } },
      });
      await new Promise((r) => setTimeout(r, 5000));
      expect((await k.get('endpt-sleepy'))?.status?.phase).toBe('up');
    }
    const hib = await k.waitPhase('endpt-sleepy', 'hibernated', 40_000);
    expect(hib.status?.reason).toBe('IdleTimeout');
    expect(hib.status?.hibernatedAt).toBeDefined();
    await eventually(async () => expect((await k.deployment('endpt-sleepy'))?.spec?.replicas).toBe(0));
    expect((await k.deployment('endpt-sleepy'))?.spec?.template.spec?.volumes?.[0]?.hostPath?.path).toBe(
      '/var/lib/berth/hf-cache',
    );

    await k.mergePatch('endpt-sleepy', {
      metadata: { annotations: { [ANNOTATION_WAKE_REQUESTED]: new Date().toISOString() } },
    });
    const waking = await k.waitPhase('endpt-sleepy', 'waking', 20_000);
    expect(waking.status?.wakeStartedAt).toBeDefined();
    const up = await k.waitPhase('endpt-sleepy', 'up', 40_000);
    expect(up.status?.wakeStartedAt).toBeUndefined();
    expect(up.status?.hibernatedAt).toBeUndefined();
    expect(await k.eventReasons('endpt-sleepy')).toEqual(
      expect.arrayContaining(['IdleTimeout', 'WakeRequested', 'ReplicaReady']),
    );
    const metrics = await (await fetch(`http://127.0.0.1:${op.metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/berth_operator_wake_duration_seconds_count 1/);
  }, 180_000);

  it('fails with a reason and an actionable message for each failure', async () => {
    await k.core.createNamespacedSecret({
      namespace: ns.name,
      body: { metadata: { name: 'hf-bad' }, stringData: { token: 'hf_bad' } },
    });
    await Promise.all([
      k.create('endpt-pull', simSpec('org/small', { 'sim.berth.dev/behavior': 'image-pull-error' })),
      k.create('endpt-crash', simSpec('org/small', { 'sim.berth.dev/behavior': 'crash-loop' })),
      k.create('endpt-huge', {
        ...simSpec('org/huge'),
        hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      }),
      k.create('endpt-gated', simSpec('org/gated')),
      k.create('endpt-badtoken', {
        ...simSpec(),
        model: { id: 'org/gated', hubTokenSecretRef: { name: 'hf-bad' } },
      }),
      k.create('endpt-nosecret', {
        ...simSpec(),
        model: { id: 'org/gated', hubTokenSecretRef: { name: 'absent' } },
      }),
      k.create('endpt-slow', simSpec('org/small', { 'sim.berth.dev/ready-after': '1h' })),
    ]);
    const expectations: Array<[string, string, RegExp]> = [
      ['endpt-pull', 'ImagePullFailed', /Cannot pull image berth\/engine-sim:dev/],
      ['endpt-crash', 'CrashLoop', /keeps crashing .*restarts/],
      ['endpt-huge', 'ModelTooLarge', /needs about 754\.4 GiB .* 1 × nvidia-l4-24gb/],
      ['endpt-gated', 'GatedModelNoToken', /is gated: accept its terms/],
      ['endpt-badtoken', 'HubTokenInvalid', /no access to gated model org\/gated/],
      ['endpt-nosecret', 'GatedModelNoToken', /Secret absent .* does not exist/],
      ['endpt-slow', 'ProvisioningTimeout', /No replica became ready within 25s/],
    ];
    for (const [name, reason, message] of expectations) {
      const ep = await k.waitPhase(name, 'failed', 60_000, reason);
      expect(ep.status?.message).toMatch(message);
      expect(ep.status?.failure).toMatchObject({ reason, generation: 1 });
      expect(ep.status?.conditions?.find((c) => c.type === 'Failed')).toMatchObject({
        status: 'True',
        reason,
      });
      await eventually(async () => expect(await k.eventReasons(name)).toContain(reason));
      // A failed endpoint holds no GPUs.
      await eventually(async () => expect((await k.deployment(name))?.spec?.replicas ?? 0).toBe(0));
    }
    // Checked before provisioning: the too-large and gated models never got a pod.
    for (const name of ['endpt-huge', 'endpt-gated', 'endpt-badtoken']) {
      const pods = await k.core.listNamespacedPod({
        namespace: ns.name,
        labelSelector: `${LABEL_ENDPOINT}=${name}`,
      });
      expect(pods.items).toHaveLength(0);
    }
  }, 180_000);

  it('a spec change after failed builds again', async () => {
    await k.waitPhase('endpt-pull', 'failed', 60_000, 'ImagePullFailed');
    await k.mergePatch('endpt-pull', {
      spec: {
        engine: { podAnnotations: { 'sim.berth.dev/behavior': null, 'sim.berth.dev/ready-after': '2s' } },
      },
    });
    await k.waitPhase('endpt-pull', 'up', 60_000);
    const ep = await k.get('endpt-pull');
    expect(ep?.status?.failure).toBeUndefined();
    expect(ep?.status?.observedGeneration).toBe(2);
    expect(await k.eventReasons('endpt-pull')).toContain('SpecChanged');
  }, 90_000);

  it('wake past its deadline fails with WakeTimeout', async () => {
    await k.create('endpt-nowake', { ...simSpec(), scaling: { idleTimeoutSeconds: 15 } });
    await k.waitPhase('endpt-nowake', 'up', 40_000);
    await k.waitPhase('endpt-nowake', 'hibernated', 40_000);
    // While asleep, the engine changes to one that never becomes ready; then a request arrives.
    await k.mergePatch('endpt-nowake', {
      spec: { engine: { podAnnotations: { 'sim.berth.dev/ready-after': '1h' } } },
    });
    await eventually(async () => expect((await k.get('endpt-nowake'))?.status?.observedGeneration).toBe(2));
    expect((await k.get('endpt-nowake'))?.status?.phase).toBe('hibernated');
    await k.mergePatch('endpt-nowake', {
      metadata: { annotations: { [ANNOTATION_WAKE_REQUESTED]: new Date().toISOString() } },
    });
    await k.waitPhase('endpt-nowake', 'waking', 20_000);
    const failed = await k.waitPhase('endpt-nowake', 'failed', 60_000, 'WakeTimeout');
    expect(failed.status?.message).toMatch(/No replica became ready within 20s of the wake request/);
  }, 180_000);

  it('terminating runs the finalizer, records an event, and garbage-collects the children', async () => {
    await k.waitPhase('endpt-basic', 'up', 10_000);
    await k.delete('endpt-basic');
    await eventually(async () => expect(await k.get('endpt-basic')).toBeUndefined(), { timeout: 30_000 });
    expect(await k.eventReasons('endpt-basic')).toContain('Terminated');
    await eventually(async () => expect(await k.deployment('endpt-basic')).toBeUndefined(), {
      timeout: 60_000,
    });
  }, 120_000);
});
