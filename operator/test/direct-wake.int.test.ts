import { ANNOTATION_WAKE_REQUESTED } from '@berth/crds';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testNamespace } from '@berth/test/cluster/env';
import { eventually } from '@berth/test/support/eventually';
import { startFakeHub } from '@berth/test/support/fake-hub';
import { Cluster, installCrd, simSpec, start, testConfig } from '@berth/test/support/operator';
import type { OperatorHandle } from '../src/operator.ts';

// The API's direct wake signal (POST /wake on the metrics port) on the real control plane: the
// leader wakes a hibernated endpoint on it alone, before and without the wake annotation; the
// receipt names the signal's time; a standby answers 409; bad requests change nothing.

const EP = 'endpt-direct-wake';
const TOKEN = 'test-wake-token-0123456789';
let ns: Awaited<ReturnType<typeof testNamespace>>;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let leader: OperatorHandle;
let standby: OperatorHandle;
let k: Cluster;

const post = (op: OperatorHandle, body: unknown, init: { token?: string; method?: string } = {}) =>
  fetch(`http://127.0.0.1:${op.metricsPort}/wake`, {
    method: init.method ?? 'POST',
    headers: { authorization: `Bearer ${init.token ?? TOKEN}`, 'content-type': 'application/json' },
    ...(init.method === 'GET' ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
  }).then(async (r) => ({ status: r.status, body: (await r.json()) as Record<string, unknown> }));

const replicas = async () =>
  (await k.apps.readNamespacedDeployment({ name: EP, namespace: ns.name })).spec?.replicas;

beforeAll(async () => {
  await installCrd();
  ns = await testNamespace('op-dwake');
  hub = await startFakeHub();
  k = new Cluster(ns.name);
  const config = { resyncSeconds: 60, wakeToken: TOKEN };
  leader = await start(testConfig(ns.name, hub.url, { ...config, identity: 'dwake-a' }));
  await eventually(() => expect(leader.isLeader()).toBe(true), { timeout: 15_000 });
  standby = await start(testConfig(ns.name, hub.url, { ...config, identity: 'dwake-b' }));
  await k.create(EP, {
    ...simSpec('org/small', { 'sim.berth.dev/ready-after': '1s' }),
    scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
  });
  await k.waitPhase(EP, 'up', 60_000);
}, 90_000);

afterAll(async () => {
  await standby?.stop();
  await leader?.stop();
  await hub?.close();
  await k?.releaseAll();
  await ns?.remove();
});

describe('POST /wake on the operator', () => {
  it('answers an endpoint that is up with "awake", and an unknown one with 404', async () => {
    expect(await post(leader, { endpoint: EP, requestedAt: new Date().toISOString() })).toEqual({
      status: 200,
      body: { result: 'awake' },
    });
    expect(await post(leader, { endpoint: 'endpt-nosuch', requestedAt: new Date().toISOString() })).toEqual({
      status: 404,
      body: { error: 'no endpoint endpt-nosuch' },
    });
  });

  it('refuses a wrong token, a GET, malformed bodies and oversized ones, and wakes nothing', async () => {
    await k.waitPhase(EP, 'hibernated', 60_000);
    const now = new Date().toISOString();
    expect(
      await post(leader, { endpoint: EP, requestedAt: now }, { token: 'wrong-token-0123456789' }),
    ).toEqual({
      status: 401,
      body: { error: 'wrong or missing bearer token (BERTH_WAKE_TOKEN)' },
    });
    expect(await post(leader, undefined, { method: 'GET' })).toEqual({
      status: 405,
      body: { error: 'POST only' },
    });
    expect(await post(leader, '{"endpoint":')).toEqual({ status: 400, body: { error: 'body is not JSON' } });
    expect(await post(leader, { endpoint: 'Not An Id', requestedAt: now })).toEqual({
      status: 400,
      body: { error: 'endpoint must be an endpoint id' },
    });
    expect(await post(leader, { endpoint: EP, requestedAt: 'yesterday' })).toEqual({
      status: 400,
      body: { error: 'requestedAt must be an RFC 3339 time' },
    });
    expect(await post(leader, { endpoint: EP, requestedAt: now, pad: 'x'.repeat(2000) })).toEqual({
      status: 413,
      body: { error: 'body over 1024 bytes' },
    });
    // A wake older than the hibernation was served already.
    expect(await post(leader, { endpoint: EP, requestedAt: '2020-01-01T00:00:00.000Z' })).toEqual({
      status: 200,
      body: { result: 'stale' },
    });
    await new Promise((r) => setTimeout(r, 1500));
    expect((await k.get(EP))?.status?.phase).toBe('hibernated');
    expect(await replicas()).toBe(0);
  });

  it('on the standby answers 409 and wakes nothing', async () => {
    expect(standby.isLeader()).toBe(false);
    expect(await post(standby, { endpoint: EP, requestedAt: new Date().toISOString() })).toEqual({
      status: 409,
      body: { error: 'not the leader' },
    });
    await new Promise((r) => setTimeout(r, 1000));
    expect((await k.get(EP))?.status?.phase).toBe('hibernated');
  });

  it('on the leader wakes the endpoint without the annotation, and the receipt names the signal', async () => {
    const requestedAt = new Date().toISOString();
    expect(await post(leader, { endpoint: EP, requestedAt })).toEqual({
      status: 202,
      body: { result: 'accepted' },
    });
    await eventually(async () => expect(await replicas()).toBe(1), { timeout: 10_000, interval: 50 });
    await k.waitPhase(EP, 'up', 60_000);
    const ep = await eventually(
      async () => {
        const e = await k.get(EP);
        return e?.status?.lastWake?.engineReadyAt ? e : false;
      },
      { timeout: 45_000, interval: 200, description: 'the wake receipt complete' },
    );
    // Nobody wrote the annotation: the hint alone woke it.
    expect(ep.metadata.annotations?.[ANNOTATION_WAKE_REQUESTED]).toBeUndefined();
    expect(ep.status?.wakeRequestSeen).toBe(requestedAt);
    expect(ep.status?.lastWake?.requestedAt).toBe(requestedAt);
    expect(Date.parse(ep.status!.lastWake!.scaledAt)).toBeGreaterThanOrEqual(Date.parse(requestedAt));
    const metrics = await (await fetch(`http://127.0.0.1:${leader.metricsPort}/metrics`)).text();
    expect(metrics).toContain('berth_operator_wake_hints_total{result="accepted"} 1');
    expect(metrics).toContain('berth_operator_wake_hints_total{result="unauthorized"} 1');
  });

  it('the annotation the API writes after its hint does not wake the endpoint a second time', async () => {
    const before = await k.get(EP);
    const seen = before!.status!.wakeRequestSeen!;
    await k.mergePatch(EP, { metadata: { annotations: { [ANNOTATION_WAKE_REQUESTED]: seen } } });
    await new Promise((r) => setTimeout(r, 1500));
    const after = await k.get(EP);
    expect(after?.status?.phase).toBe('up');
    expect(after?.status?.lastWake?.scaledAt).toBe(before?.status?.lastWake?.scaledAt);
  });
});
