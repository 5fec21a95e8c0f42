import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kubectl, kubectlOk, testNamespace } from '@berth/test/cluster/env';
import { eventually } from '@berth/test/support/eventually';
import { startFakeHub } from '@berth/test/support/fake-hub';
import { Cluster, installCrd, simSpec, start, testConfig } from '@berth/test/support/operator';
import type { OperatorHandle } from '../src/operator.ts';

// InferencePools on the real control plane, with the InferencePool CRD of the Gateway API Inference
// Extension's Go module (test/gateway/inference-crds.sh pins v1.5.0): without the CRD an endpoint
// that asks for a pool runs as ever and nothing fails; once the CRD is installed the pool appears
// (no restart), follows the spec, is restored when edited or deleted by hand, is removed when the
// endpoint stops asking, and goes with the endpoint (owner reference). An endpoint that does not
// ask gets none.

const CRD = execFileSync(
  'bash',
  [fileURLToPath(new URL('../../test/gateway/inference-crds.sh', import.meta.url))],
  {
    encoding: 'utf8',
  },
).trim();
const POOLS = 'inferencepools.inference.networking.k8s.io';
const EP = 'endpt-pool';
const PLAIN = 'endpt-nopool';

let ns: Awaited<ReturnType<typeof testNamespace>>;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let op: OperatorHandle;
let k: Cluster;

interface Pool {
  metadata: { uid: string; ownerReferences?: { kind: string; name: string; controller?: boolean }[] };
  spec: {
    selector: { matchLabels: Record<string, string> };
    targetPorts: { number: number }[];
    endpointPickerRef: { kind?: string; name: string; port?: { number: number }; failureMode?: string };
  };
}

/** The pool as the API server has it, or undefined. */
async function pool(name: string): Promise<Pool | undefined> {
  const r = await kubectl(['get', 'inferencepool', name, '-o', 'json'], { namespace: ns.name });
  if (r.code !== 0) {
    if (/NotFound|not found/.test(r.stderr)) return undefined;
    throw new Error(r.stderr);
  }
  return JSON.parse(r.stdout) as Pool;
}

const counter = async (name: string, labels: Record<string, string>) => {
  const m = await op.metrics.registry.getSingleMetric(name)!.get();
  return m.values
    .filter((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))
    .reduce((sum, v) => sum + v.value, 0);
};

beforeAll(async () => {
  await installCrd();
  // A cluster this suite ran on before has the CRD: start without it.
  await kubectlOk(['delete', 'crd', POOLS, '--ignore-not-found', '--wait=true']);
  ns = await testNamespace('op-pools');
  hub = await startFakeHub();
  k = new Cluster(ns.name);
  op = await start(
    testConfig(ns.name, hub.url, {
      leaderElection: false,
      inferencePools: { enabled: false, picker: { service: '{name}-epp', port: 9002 } },
      poolRecheckMs: 500,
    }),
  );
}, 90_000);

afterAll(async () => {
  await op?.stop();
  await hub?.close();
  await k?.releaseAll();
  await ns?.remove();
});

describe('InferencePool per endpoint', () => {
  it('without the CRD: an endpoint that asks for a pool comes up as ever, and the operator writes none', async () => {
    await k.create(EP, { ...simSpec(), inferencePool: { enabled: true } });
    await k.create(PLAIN, simSpec());
    await k.waitPhase(EP, 'up', 60_000);
    await k.waitPhase(PLAIN, 'up', 60_000);
    expect(await counter('berth_operator_api_writes_total', { resource: 'inferencepool' })).toBe(0);
    expect(await counter('berth_operator_errors_total', { where: 'reconcile' })).toBe(0);
  });

  it('once the CRD is installed, the pool appears: the engine pods, the engine port, the default picker, owned', async () => {
    await kubectlOk(['apply', '--server-side', '-f', CRD]);
    await kubectlOk(['wait', '--for=condition=Established', `crd/${POOLS}`, '--timeout=60s']);
    const p = await eventually(async () => (await pool(EP)) ?? false, {
      timeout: 20_000,
      interval: 200,
      description: 'the pool of the endpoint that asks',
    });
    expect(p.spec.selector.matchLabels).toEqual({ 'berth.dev/endpoint': EP });
    expect(p.spec.targetPorts).toEqual([{ number: 8000 }]);
    expect(p.spec.endpointPickerRef).toMatchObject({
      kind: 'Service',
      name: `${EP}-epp`,
      port: { number: 9002 },
      failureMode: 'FailClose',
    });
    expect(p.metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: 'DedicatedEndpoint', name: EP, controller: true }),
    ]);
    // The selector picks exactly the endpoint's engine pods.
    const pods = await k.core.listNamespacedPod({
      namespace: ns.name,
      labelSelector: `berth.dev/endpoint=${EP}`,
    });
    expect(pods.items.length).toBeGreaterThan(0);
  });

  it('an endpoint that does not ask gets no pool', async () => {
    // Given the time the first pool took, a second one would be there by now.
    await new Promise((r) => setTimeout(r, 1000));
    expect(await pool(PLAIN)).toBeUndefined();
  });

  it('follows the spec: a picker named in the endpoint replaces the default', async () => {
    await k.mergePatch(EP, {
      spec: {
        inferencePool: {
          enabled: true,
          endpointPicker: { name: 'shared-epp', port: 9003, failureMode: 'FailOpen' },
        },
      },
    });
    await eventually(
      async () =>
        expect((await pool(EP))?.spec.endpointPickerRef).toMatchObject({
          name: 'shared-epp',
          port: { number: 9003 },
          failureMode: 'FailOpen',
        }),
      { timeout: 15_000, interval: 200 },
    );
  });

  it('restores a pool edited by hand, and one deleted by hand', async () => {
    await kubectlOk(
      [
        'patch',
        'inferencepool',
        EP,
        '--type=merge',
        '-p',
        JSON.stringify({ spec: { targetPorts: [{ number: 9999 }] } }),
      ],
      { namespace: ns.name },
    );
    await eventually(async () => expect((await pool(EP))?.spec.targetPorts).toEqual([{ number: 8000 }]), {
      timeout: 15_000,
      interval: 200,
    });
    const before = (await pool(EP))!.metadata.uid;
    await kubectlOk(['delete', 'inferencepool', EP, '--wait=true'], { namespace: ns.name });
    const again = await eventually(async () => (await pool(EP)) ?? false, { timeout: 15_000, interval: 200 });
    expect(again.metadata.uid).not.toBe(before);
  });

  it('removes the pool when the endpoint stops asking, and makes it again when it asks', async () => {
    await k.mergePatch(EP, { spec: { inferencePool: { enabled: false } } });
    await eventually(async () => (await pool(EP)) === undefined, { timeout: 15_000, interval: 200 });
    await k.mergePatch(EP, { spec: { inferencePool: { enabled: true } } });
    await eventually(async () => (await pool(EP)) ?? false, { timeout: 15_000, interval: 200 });
  });

  it('goes with the endpoint', async () => {
    await k.delete(EP);
    await eventually(async () => (await pool(EP)) === undefined, {
      timeout: 60_000,
      interval: 250,
      description: 'the garbage collector to remove the pool of the deleted endpoint',
    });
  });
});
