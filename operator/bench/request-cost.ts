// What one request of each kind the operator makes costs the control plane: CPU seconds of
// kube-apiserver and etcd (and this process) per 1,000 requests, n at a time, against endpoints
// that exist (created as the API creates them) with no operator running.
// Usage: KUBECONFIG=… node --import tsx operator/bench/request-cost.ts [N] [CONCURRENCY]
import { API_VERSION, FIELD_MANAGER, GROUP, KIND, PLURAL, VERSION } from '@berth/crds';
import { reuseConnections } from '@berth/operator';
import { conditionsFor } from '../src/core/conditions.ts';
import { EventsV1Api, PatchStrategy, setHeaderOptions, V1MicroTime } from '@kubernetes/client-node';
import { testNamespace } from '@berth/test/cluster/env';
import { Cluster, installCrd } from '@berth/test/support/operator';
import { cpuBetween, cpuSnapshot, createAsApi, pool, releaseAll } from './lib.ts';

const N = Number(process.argv[2] ?? 500);
const C = Number(process.argv[3] ?? 32);
await installCrd();
const ns = await testNamespace('req-cost');
const k = new Cluster(ns.name);
reuseConnections(k.kc);
const events = k.kc.makeApiClient(EventsV1Api);
const names = Array.from({ length: N }, (_, i) => `endpt-cost-${i}`);
const now = new Date().toISOString();
const status = (phase: 'building' | 'up', reason: string, message: string) => ({
  phase,
  reason,
  message,
  observedGeneration: 1,
  replicas: 1,
  readyReplicas: phase === 'up' ? 1 : 0,
  url: 'http://x.y.svc:8000',
  lastTransitionTime: now,
  conditions: conditionsFor(phase, reason, message).map((c) => ({
    ...c,
    observedGeneration: 1,
    lastTransitionTime: now,
  })),
  preflightGeneration: 1,
  buildingSince: now,
});
const results: Record<string, unknown> = {};
async function measure(label: string, fn: (name: string) => Promise<unknown>) {
  const a = cpuSnapshot();
  await pool(names, C, fn);
  const d = cpuBetween(a, cpuSnapshot());
  const per1000 = (s: number | undefined) => +(((s ?? 0) * 1000) / N).toFixed(1);
  results[label] = {
    wallSeconds: d.wallSeconds,
    cpuSecondsPer1000: {
      apiserver: per1000(d.cpuSeconds['kube-apiserver']),
      etcd: per1000(d.cpuSeconds.etcd),
      client: per1000(d.cpuSeconds['bench+operator']),
      controllerManager: per1000(d.cpuSeconds['kube-controller-manager']),
    },
  };
}
const SSA = setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply);
const MERGE = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const spec = {
  account: 'bench',
  model: { id: 'org/small' },
  hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
};
await measure('create endpoint', (n) => createAsApi(k, n, spec));
const applyStatus = (n: string, s: object) =>
  k.custom.patchNamespacedCustomObjectStatus(
    {
      group: GROUP,
      version: VERSION,
      namespace: ns.name,
      plural: PLURAL,
      name: n,
      body: { apiVersion: API_VERSION, kind: KIND, metadata: { name: n, namespace: ns.name }, status: s },
      fieldManager: FIELD_MANAGER,
      force: true,
    },
    SSA,
  );
const mergeStatus = (n: string, s: object) =>
  k.custom.patchNamespacedCustomObjectStatus(
    { group: GROUP, version: VERSION, namespace: ns.name, plural: PLURAL, name: n, body: { status: s } },
    MERGE,
  );
await measure('status apply (building)', (n) =>
  applyStatus(n, status('building', 'Provisioning', 'Starting the engine and loading model weights')),
);
await measure('status apply (up)', (n) => applyStatus(n, status('up', 'ReplicaReady', '1 replica ready')));
await measure('status merge patch (building)', (n) =>
  mergeStatus(n, status('building', 'Provisioning', 'Starting the engine and loading model weights')),
);
await measure('status merge patch (up)', (n) =>
  mergeStatus(n, status('up', 'ReplicaReady', '1 replica ready')),
);
await measure('event create', (n) =>
  events.createNamespacedEvent({
    namespace: ns.name,
    body: {
      metadata: { generateName: `${n}-`, namespace: ns.name },
      eventTime: new V1MicroTime(),
      reportingController: 'berth.dev/operator',
      reportingInstance: 'cost',
      action: 'Reconcile',
      reason: 'Provisioning',
      note: 'Starting the engine and loading model weights',
      type: 'Normal',
      regarding: { apiVersion: API_VERSION, kind: KIND, name: n, namespace: ns.name },
    },
  }),
);
await measure('service apply', (n) =>
  k.core.patchNamespacedService(
    {
      name: n,
      namespace: ns.name,
      fieldManager: FIELD_MANAGER,
      force: true,
      body: {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: n, namespace: ns.name },
        spec: { selector: { x: n }, ports: [{ name: 'http', port: 8000, targetPort: 8000 }] },
      },
    },
    SSA,
  ),
);
process.stdout.write(JSON.stringify({ n: N, concurrency: C, results }, null, 1) + '\n');
await releaseAll(k);
await ns.remove();
process.exit(0);
