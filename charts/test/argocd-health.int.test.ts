// The Argo CD health check the chart ships (files/argocd-health.lua), run as Argo CD runs it
// (gopher-lua, Argo CD's restricted libraries: test/gitops/cmd/argocd-health) against a
// DedicatedEndpoint in every phase, and the documented way to add it to an existing argocd-cm
// (server-side apply of one key) against the local API server. Live endpoints driven through their
// phases by the operator: test/e2e/gitops-status.int.test.ts.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { API_VERSION, DedicatedEndpointSchema, KIND, type DedicatedEndpointStatus } from '@berth/crds';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kubectlJson, kubectlOk, testNamespace } from '@berth/test/cluster/env';
import { ARGOCD_HEALTH_SCRIPT, argocdHealth } from '@berth/test/gitops/tools';

const at = '2026-01-01T00:00:00Z';

/** A DedicatedEndpoint as the API server returns it, checked against the CRD's schema. */
function endpoint(status: DedicatedEndpointStatus | undefined, generation = 1) {
  const object = {
    apiVersion: API_VERSION,
    kind: KIND,
    metadata: { name: 'endpt-argo', namespace: 'berth', generation, uid: 'u-1', resourceVersion: '7' },
    spec: {
      account: 'acct_1',
      model: { id: 'org/small' },
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
    },
    ...(status ? { status } : {}),
  };
  DedicatedEndpointSchema.parse(object);
  return object;
}

const cond = (type: string, on: boolean) => ({
  type,
  status: on ? ('True' as const) : ('False' as const),
  observedGeneration: 1,
  lastTransitionTime: at,
});
const status = (
  phase: DedicatedEndpointStatus['phase'] & string,
  reason: string,
  message: string,
  extra: Partial<DedicatedEndpointStatus> = {},
): DedicatedEndpointStatus => ({
  phase,
  reason,
  message,
  observedGeneration: 1,
  replicas: phase === 'up' ? 1 : 0,
  readyReplicas: phase === 'up' ? 1 : 0,
  lastTransitionTime: at,
  conditions: [
    cond('Ready', phase === 'up'),
    cond('Hibernated', phase === 'hibernated'),
    cond('Failed', phase === 'failed'),
  ],
  ...extra,
});

describe('Argo CD health check (charts/berth/files/argocd-health.lua) run by gopher-lua as Argo CD runs it', () => {
  const cases: [string, object, { status: string; message: string }][] = [
    [
      'not yet reconciled (no status)',
      endpoint(undefined),
      { status: 'Progressing', message: 'Waiting for the Berth operator to reconcile the endpoint' },
    ],
    [
      'building',
      endpoint(
        status('building', 'Provisioning', 'Starting the engine and loading model weights', {
          buildingSince: at,
        }),
      ),
      { status: 'Progressing', message: 'Provisioning: Starting the engine and loading model weights' },
    ],
    [
      'building, unschedulable',
      endpoint(
        status('building', 'Unschedulable', '0/5 nodes are available: 5 Insufficient nvidia.com/gpu.'),
      ),
      {
        status: 'Progressing',
        message: 'Unschedulable: 0/5 nodes are available: 5 Insufficient nvidia.com/gpu.',
      },
    ],
    [
      'waking',
      endpoint(
        status('waking', 'WakeRequested', 'A request reached the hibernated endpoint; starting a replica', {
          wakeStartedAt: at,
        }),
      ),
      {
        status: 'Progressing',
        message: 'WakeRequested: A request reached the hibernated endpoint; starting a replica',
      },
    ],
    [
      'up',
      endpoint(status('up', 'ReplicaReady', '1 replica ready', { upSince: at })),
      { status: 'Healthy', message: 'ReplicaReady: 1 replica ready' },
    ],
    [
      'hibernated (scaled to zero on purpose)',
      endpoint(
        status(
          'hibernated',
          'IdleTimeout',
          'No traffic for 900s; scaled to zero. The next request wakes it.',
          {
            hibernatedAt: at,
          },
        ),
      ),
      {
        status: 'Healthy',
        message: 'IdleTimeout: No traffic for 900s; scaled to zero. The next request wakes it.',
      },
    ],
    [
      'failed',
      endpoint(
        status(
          'failed',
          'ModelTooLarge',
          'org/huge needs 810 GiB of weights; 1 × NVIDIA L4 24GB has 24 GiB.',
          {
            failure: { reason: 'ModelTooLarge', message: 'm', generation: 1, at },
          },
        ),
      ),
      {
        status: 'Degraded',
        message: 'ModelTooLarge: org/huge needs 810 GiB of weights; 1 × NVIDIA L4 24GB has 24 GiB.',
      },
    ],
    [
      'failed without a message',
      endpoint(status('failed', 'ImagePullFailed', '')),
      { status: 'Degraded', message: 'ImagePullFailed: Failed' },
    ],
    [
      'up, but the spec changed since (generation 2, observed 1)',
      endpoint(status('up', 'ReplicaReady', '1 replica ready'), 2),
      { status: 'Progressing', message: 'Waiting for the Berth operator to observe generation 2' },
    ],
  ];

  for (const [what, object, want] of cases) {
    it(`${what} → ${want.status}`, async () => {
      expect(await argocdHealth(object)).toEqual(want);
    });
  }

  it('a phase this script does not know → Unknown, naming it', async () => {
    const object = endpoint(status('up', 'ReplicaReady', '1 replica ready'));
    (object as { status: { phase: string } }).status.phase = 'draining';
    expect(await argocdHealth(object)).toEqual({ status: 'Unknown', message: 'Unknown phase draining' });
  });

  describe('the harness is as strict as Argo CD', () => {
    let dir: string;
    beforeAll(() => {
      dir = mkdtempSync(join(tmpdir(), 'berth-lua-'));
    });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    const script = (name: string, body: string) => {
      const path = join(dir, name);
      writeFileSync(path, body);
      return path;
    };

    it("has no string library (custom health scripts run without Argo CD's useOpenLibs)", async () => {
      const path = script('string.lua', 'return { status = "Healthy", message = string.upper(obj.kind) }');
      await expect(argocdHealth(endpoint(undefined), path)).rejects.toThrow(
        /attempt to index a non-table object\(nil\) with key 'upper'/,
      );
    });

    it("turns a status outside Argo CD's set into Unknown, with Argo CD's message", async () => {
      const path = script('bad.lua', 'return { status = "Fine" }');
      expect(await argocdHealth(endpoint(undefined), path)).toEqual({
        status: 'Unknown',
        message: 'Lua returned an invalid health status',
      });
    });

    it('stops a script that runs past one second', async () => {
      const path = script('loop.lua', 'while true do end');
      await expect(argocdHealth(endpoint(undefined), path)).rejects.toThrow(/context deadline exceeded/);
    });
  });
});

describe('adding the check to an existing argocd-cm, as the chart README documents', () => {
  let ns: Awaited<ReturnType<typeof testNamespace>>;
  beforeAll(async () => {
    ns = await testNamespace('argocd-cm');
  });
  afterAll(async () => {
    await ns?.remove();
  });

  it('server-side apply of the one key leaves the other settings alone', async () => {
    await kubectlOk(['create', 'configmap', 'argocd-cm', '--from-literal=url=https://argo.example.com'], {
      namespace: ns.name,
    });
    await kubectlOk(['label', 'configmap', 'argocd-cm', 'app.kubernetes.io/part-of=argocd'], {
      namespace: ns.name,
    });
    // The README's two commands, with the repository path of the script.
    const manifest = await kubectlOk(
      [
        'create',
        'configmap',
        'argocd-cm',
        '--dry-run=client',
        '-o',
        'yaml',
        `--from-file=resource.customizations.health.berth.dev_DedicatedEndpoint=${ARGOCD_HEALTH_SCRIPT}`,
      ],
      { namespace: ns.name },
    );
    await kubectlOk(['apply', '--server-side', '--field-manager=berth', '-f', '-'], {
      namespace: ns.name,
      input: manifest,
    });
    const cm = await kubectlJson<{
      metadata: { labels: Record<string, string> };
      data: Record<string, string>;
    }>(['get', 'configmap', 'argocd-cm'], { namespace: ns.name });
    expect(cm.data).toEqual({
      url: 'https://argo.example.com',
      'resource.customizations.health.berth.dev_DedicatedEndpoint': readFileSync(
        ARGOCD_HEALTH_SCRIPT,
        'utf8',
      ),
    });
    expect(cm.metadata.labels['app.kubernetes.io/part-of']).toBe('argocd');
  });
});
