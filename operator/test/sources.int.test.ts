import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kubectl, testNamespace } from '@berth/test/cluster/env';
import { Cluster, installCrd, simSpec, testConfig } from '@berth/test/support/operator';
import { pino } from 'pino';
import { startOperator, type OperatorHandle } from '../src/operator.ts';

// Model sources on the real control plane, with the model hub unreachable (a closed port): weights
// from a PersistentVolumeClaim start with no hub call at all; object storage that does not answer
// and a hub that does not answer fail with ModelSourceUnreachable and say what to fix — in seconds
// and within the default minute, not after the 30-minute provisioning deadline; an operator with the
// hub checks switched off starts hub models without asking; the CRD refuses a malformed source.

const DEAD_HUB = 'http://127.0.0.1:9';
let ns: Awaited<ReturnType<typeof testNamespace>>;
let k: Cluster;
const ops: OperatorHandle[] = [];
const hubCalls: string[] = [];
const countingFetch: typeof fetch = (input, init) => {
  hubCalls.push(String(input instanceof Request ? input.url : input));
  return fetch(input, init);
};

async function operator(overrides: Parameters<typeof testConfig>[2]) {
  const config = testConfig(ns.name, DEAD_HUB, {
    leaderElection: false,
    provisioningTimeoutSeconds: 1800,
    ...overrides,
  });
  const op = await startOperator(config, {
    log: pino({ level: config.logLevel }),
    fetch: countingFetch,
  });
  ops.push(op);
  return op;
}

beforeAll(async () => {
  await installCrd();
  ns = await testNamespace('op-sources');
  k = new Cluster(ns.name);
}, 60_000);

afterAll(async () => {
  for (const op of ops) await op.stop();
  await k?.releaseAll();
  await ns?.remove();
  await kubectl(['delete', 'pv', `weights-${ns?.name}`, '--ignore-not-found']);
});

describe('model sources with the hub unreachable', () => {
  it('pvc:// weights: up, no hub call, the claim mounted read-only and served from /models', async () => {
    await operator({});
    const pv = `weights-${ns.name}`;
    await k.core.createPersistentVolume({
      body: {
        metadata: { name: pv },
        spec: {
          capacity: { storage: '1Gi' },
          accessModes: ['ReadOnlyMany'],
          storageClassName: '',
          hostPath: { path: '/var/lib/berth/weights' },
        },
      },
    });
    await k.core.createNamespacedPersistentVolumeClaim({
      namespace: ns.name,
      body: {
        metadata: { name: 'weights' },
        spec: {
          accessModes: ['ReadOnlyMany'],
          storageClassName: '',
          volumeName: pv,
          resources: { requests: { storage: '1Gi' } },
        },
      },
    });
    hubCalls.length = 0;
    await k.create('endpt-pvc', {
      ...simSpec('org/small'),
      model: { id: 'org/small', source: 'pvc://weights/org/small' },
    });
    const up = await k.waitPhase('endpt-pvc', 'up', 60_000);
    expect(up.status?.preflightGeneration).toBe(1);
    expect(hubCalls).toEqual([]);
    const pod = (await k.deployment('endpt-pvc'))!.spec!.template.spec!;
    expect(pod.volumes).toContainEqual({
      name: 'model-source',
      persistentVolumeClaim: { claimName: 'weights', readOnly: true },
    });
    expect(pod.containers[0]!.args?.slice(0, 4)).toEqual([
      '--model',
      '/models/org/small',
      '--served-model-name',
      'org/small',
    ]);
  }, 90_000);

  it('pvc:// naming a claim that does not exist fails at once, naming the claim', async () => {
    await k.create('endpt-noclaim', {
      ...simSpec(),
      model: { id: 'org/small', source: 'pvc://missing-claim' },
    });
    const failed = await k.waitPhase('endpt-noclaim', 'failed', 15_000, 'ModelSourceUnreachable');
    expect(failed.status?.message).toBe(
      `PersistentVolumeClaim missing-claim named by spec.model.source does not exist in namespace ${ns.name}: create it with the weights, or fix spec.model.source. Then update the endpoint spec to retry.`,
    );
    expect((await k.deployment('endpt-noclaim'))?.spec?.replicas ?? 0).toBe(0);
  });

  it('s3:// storage that does not answer fails fast with its reason and what to fix', async () => {
    await k.core.createNamespacedSecret({
      namespace: ns.name,
      body: {
        metadata: { name: 's3-creds' },
        stringData: {
          AWS_ACCESS_KEY_ID: 'x',
          AWS_SECRET_ACCESS_KEY: 'y',
          AWS_ENDPOINT_URL: 'http://127.0.0.1:9',
        },
      },
    });
    const t0 = Date.now();
    await k.create('endpt-s3', {
      ...simSpec(),
      model: {
        id: 'org/small',
        source: 's3://weights/org/small',
        credentialsSecretRef: { name: 's3-creds' },
      },
    });
    const failed = await k.waitPhase('endpt-s3', 'failed', 20_000, 'ModelSourceUnreachable');
    expect(Date.now() - t0).toBeLessThan(20_000);
    expect(failed.status?.message).toMatch(
      /^Object storage http:\/\/127\.0\.0\.1:9 for spec\.model\.source s3:\/\/weights\/org\/small did not answer \(.+\): check AWS_ENDPOINT_URL in the Secret named by spec\.model\.credentialsSecretRef and that the cluster can reach it\. Then update the endpoint spec to retry\.$/,
    );
    expect(failed.status?.conditions?.find((c) => c.type === 'Stalled')).toMatchObject({
      status: 'True',
      reason: 'ModelSourceUnreachable',
    });
  });

  it('s3:// with a credentials Secret that does not exist fails at once, naming the Secret', async () => {
    await k.create('endpt-s3-nosecret', {
      ...simSpec(),
      model: { id: 'org/small', source: 's3://weights', credentialsSecretRef: { name: 'nope' } },
    });
    const failed = await k.waitPhase('endpt-s3-nosecret', 'failed', 15_000, 'ModelSourceUnreachable');
    expect(failed.status?.message).toContain(
      `Secret nope named by spec.model.credentialsSecretRef does not exist in namespace ${ns.name}`,
    );
  });

  it('a hub id with the hub unreachable fails within the default minute, saying what to fix', async () => {
    const t0 = Date.now();
    await k.create('endpt-hub', simSpec('org/small'));
    const building = await k.waitPhase('endpt-hub', 'building', 15_000, 'CheckingModel');
    expect(building.status?.message).toMatch(
      /^Waiting for the model hub: GET http:\/\/127\.0\.0\.1:9\/api\/models\/org\/small/,
    );
    const failed = await k.waitPhase('endpt-hub', 'failed', 80_000, 'ModelSourceUnreachable');
    const seconds = (Date.now() - t0) / 1000;
    expect(seconds).toBeGreaterThanOrEqual(59);
    expect(seconds).toBeLessThan(75);
    expect(failed.status?.message).toContain('Point HF_ENDPOINT at a hub or mirror the cluster can reach');
    expect(failed.status?.message).toContain('set BERTH_PREFLIGHT=false');
  }, 100_000);
});

describe('an operator with the hub checks switched off (BERTH_PREFLIGHT=false)', () => {
  it('starts a hub model without asking the hub', async () => {
    for (const op of ops.splice(0)) await op.stop();
    await operator({ preflight: false });
    hubCalls.length = 0;
    await k.create('endpt-nocheck', simSpec('org/small'));
    const up = await k.waitPhase('endpt-nocheck', 'up', 60_000);
    expect(up.status?.preflightGeneration).toBe(1);
    expect(hubCalls).toEqual([]);
  }, 90_000);
});

describe('the CRD', () => {
  it('refuses a malformed source, naming the field', async () => {
    const manifest = JSON.stringify({
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'DedicatedEndpoint',
      metadata: { name: 'endpt-bad-source', namespace: ns.name },
      spec: { ...simSpec(), model: { id: 'org/small', source: 'ftp://weights/org/small' } },
    });
    const r = await kubectl(['apply', '-f', '-'], { input: manifest });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(
      'spec.model.source must be pvc://<claim>[/path], file:///<dir> (or /<dir>), s3://<bucket>[/prefix] or oci://<registry>/<image>[:tag]',
    );
    expect(await k.get('endpt-bad-source')).toBeUndefined();
  });
});
