// What one request of each kind the operator makes costs the control plane: CPU seconds of
// kube-apiserver and etcd (and this process) per 1,000 requests, n at a time, against endpoints
// that exist (created as the API creates them) with no operator running.
// Usage: KUBECONFIG=… node --import tsx operator/bench/request-cost.ts [N] [CONCURRENCY]
import { API_VERSION, FIELD_MANAGER, GROUP, KIND, PLURAL, VERSION } from '@berth/crds';
import { KubeRequests, resourcePath, reuseConnections } from '@berth/operator';
import { buildCrd } from '@berth/crds';
import { ApiextensionsV1Api } from '@kubernetes/client-node';
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
const named = (set: string) => Array.from({ length: N }, (_, i) => `endpt-cost-${set}${i}`);
const names = named('');
const rq = new KubeRequests(k.kc);
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
async function measure(label: string, fn: (name: string) => Promise<unknown>, over = names) {
  const a = cpuSnapshot();
  await pool(over, C, fn);
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
// An endpoint going up writes its status twice: building, then up. Each is measured over `over`.
const BUILDING = ['building', 'Provisioning', 'Starting the engine and loading model weights'] as const;
const UP = ['up', 'ReplicaReady', '1 replica ready'] as const;
async function measureStatusWrites(
  label: (phase: 'building' | 'up') => string,
  write: (name: string, s: object) => Promise<unknown>,
  over = names,
  make: (phase: 'building' | 'up', reason: string, message: string) => object = status,
) {
  await measure(label('building'), (n) => write(n, make(...BUILDING)), over);
  await measure(label('up'), (n) => write(n, make(...UP)), over);
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
await measureStatusWrites((p) => `status apply (${p})`, applyStatus);
await measureStatusWrites((p) => `status merge patch (${p})`, mergeStatus);
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

// The same writes through the operator's own request path (requests.ts) instead of client-node's
// typed clients: the client column is what the operator's process spends per request.
const lean = named('lean-');
await measure('create endpoint (again, for the lean set)', (n) => createAsApi(k, n, spec), lean);
// A status write by server-side apply through requests.ts, for the endpoint kind of `apiVersion` under `base`.
const statusApply = (apiVersion: string, base: string) => (n: string, s: object) =>
  rq.apply(
    `${base}/${n}/status`,
    { apiVersion, kind: KIND, metadata: { name: n, namespace: ns.name }, status: s },
    FIELD_MANAGER,
  );
const leanStatus = statusApply(API_VERSION, `/apis/${GROUP}/${VERSION}/namespaces/${ns.name}/${PLURAL}`);
await measureStatusWrites((p) => `status apply (${p}), lean client`, leanStatus, lean);
await measure(
  'event create, lean client',
  (n) =>
    rq.send('POST', resourcePath('events.k8s.io/v1', 'Event', ns.name), {
      apiVersion: 'events.k8s.io/v1',
      kind: 'Event',
      metadata: { generateName: `${n}-`, namespace: ns.name },
      eventTime: new Date().toISOString().replace(/(\.\d{3})Z$/, '$1000Z'),
      reportingController: 'berth.dev/operator',
      reportingInstance: 'cost',
      action: 'Reconcile',
      reason: 'Provisioning',
      note: 'Starting the engine and loading model weights',
      type: 'Normal',
      regarding: { apiVersion: API_VERSION, kind: KIND, name: n, namespace: ns.name },
    }),
  lean,
);
const svcBody = (n: string) => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name: n, namespace: ns.name },
  spec: { selector: { x: n }, ports: [{ name: 'http', port: 8000, targetPort: 8000 }] },
});
await measure(
  'service create (POST), lean client',
  (n) =>
    rq.send('POST', `${resourcePath('v1', 'Service', ns.name)}?fieldManager=${FIELD_MANAGER}`, svcBody(n)),
  lean,
);
const applied = named('svc-apply-');
await measure(
  'service apply, lean client',
  (n) => rq.apply(resourcePath('v1', 'Service', ns.name, n), svcBody(n), FIELD_MANAGER),
  applied,
);
// A Deployment of 0 replicas (its ReplicaSet is made by the controller-manager either way).
const depBody = (n: string) => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name: n, namespace: ns.name, labels: { app: n } },
  spec: {
    replicas: 0,
    selector: { matchLabels: { app: n } },
    template: {
      metadata: { labels: { app: n } },
      spec: {
        containers: [{ name: 'engine', image: 'vllm/vllm-openai:v0.11.0', args: ['--model', 'org/small'] }],
      },
    },
  },
});
await measure(
  'deployment create (POST), lean client',
  (n) =>
    rq.send(
      'POST',
      `${resourcePath('apps/v1', 'Deployment', ns.name)}?fieldManager=${FIELD_MANAGER}`,
      depBody(n),
    ),
  lean,
);
await measure(
  'deployment apply, lean client',
  (n) => rq.apply(resourcePath('apps/v1', 'Deployment', ns.name, n), depBody(n), FIELD_MANAGER),
  applied,
);
// A smaller status: what the status costs by its size (phase, reason and message only).
const small = named('small-');
await measure('create endpoint (small-status set)', (n) => createAsApi(k, n, spec), small);
const smallStatus = (phase: 'building' | 'up', reason: string, message: string) => ({
  phase,
  reason,
  message,
  observedGeneration: 1,
});
await measureStatusWrites(
  (p) => `status apply (${p}), phase/reason/message only`,
  leanStatus,
  small,
  smallStatus,
);
// What the CRD's CEL rules cost: the same resource under another group, its schema without them.
const strip = (node: unknown): unknown =>
  Array.isArray(node)
    ? node.map(strip)
    : node && typeof node === 'object'
      ? Object.fromEntries(
          Object.entries(node)
            .filter(([key]) => key !== 'x-kubernetes-validations')
            .map(([key, v]) => [key, strip(v)]),
        )
      : node;
const NOCEL_GROUP = 'nocel.bench.berth.dev';
const crd = strip(buildCrd()) as {
  metadata: { name: string };
  spec: { group: string; names: { shortNames?: string[]; plural: string } };
};
crd.metadata.name = `${crd.spec.names.plural}.${NOCEL_GROUP}`;
crd.spec.group = NOCEL_GROUP;
delete crd.spec.names.shortNames;
const ext = k.kc.makeApiClient(ApiextensionsV1Api);
await ext.createCustomResourceDefinition({ body: crd as never }).catch((e: { code?: number }) => {
  if (e.code !== 409) throw e;
});
for (let i = 0; i < 100; i++) {
  const got = await ext.readCustomResourceDefinition({ name: crd.metadata.name });
  if (got.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True')) break;
  await new Promise((r) => setTimeout(r, 200));
}
const nocel = named('nocel-');
const nocelBase = `/apis/${NOCEL_GROUP}/${VERSION}/namespaces/${ns.name}/${PLURAL}`;
await measure(
  'create endpoint, CRD without CEL rules',
  (n) =>
    rq.send('POST', nocelBase, {
      apiVersion: `${NOCEL_GROUP}/${VERSION}`,
      kind: KIND,
      metadata: { name: n, namespace: ns.name },
      spec,
    }),
  nocel,
);
await measureStatusWrites(
  (p) => `status apply (${p}), CRD without CEL rules`,
  statusApply(`${NOCEL_GROUP}/${VERSION}`, nocelBase),
  nocel,
);
process.stdout.write(JSON.stringify({ n: N, concurrency: C, results }, null, 1) + '\n');
await releaseAll(k);
await ns.remove();
await ext.deleteCustomResourceDefinition({ name: crd.metadata.name });
process.exit(0);
