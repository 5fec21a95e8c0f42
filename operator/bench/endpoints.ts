// Benchmark: N endpoints reaching `up` on the kwok cluster, operator memory, API request rate at rest.
// Usage: KUBECONFIG=… node --import tsx operator/bench/endpoints.ts [N]
//
// The local cluster has 24 fake GPUs and 5 × 110 pod slots, so the bench adds tainted kwok nodes and
// runs the operator with a catalog whose `nvidia-h100-80gb` maps to 1 CPU on those nodes (the
// builders tolerate a taint keyed by the resource name). Everything it adds is removed at the end.
import { createRequire } from 'node:module';
import { DEFAULT_CATALOG, GROUP, PLURAL, VERSION } from '@berth/crds';
import type { DedicatedEndpoint } from '@berth/crds';
import { kubectlOk, testNamespace } from '@berth/test/cluster/env';
import { startFakeHub } from '@berth/test/support/fake-hub';
import { Cluster, installCrd, start, testConfig } from '@berth/test/support/operator';

const N = Number(process.argv[2] ?? 1000);
const NODES = Math.ceil(N / 100) + 1;

// Count every HTTP request the operator's Kubernetes client makes (client-node's own undici).
const requireFromClient = createRequire(createRequire(import.meta.url).resolve('@kubernetes/client-node'));
const undici = requireFromClient('undici') as {
  Agent: { prototype: { dispatch: (...a: unknown[]) => unknown } };
};
let requests = 0;
const dispatch = undici.Agent.prototype.dispatch;
undici.Agent.prototype.dispatch = function (this: unknown, ...args: unknown[]) {
  requests++;
  return dispatch.apply(this, args);
};

const nodeYaml = (i: number) => `apiVersion: v1
kind: Node
metadata:
  name: berth-bench-${i}
  annotations: { kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0" }
  labels: { kubernetes.io/hostname: berth-bench-${i}, berth.dev/bench-node: "true", type: kwok }
spec:
  taints: [{ key: cpu, value: bench, effect: NoSchedule }]
status:
  allocatable: { cpu: "1000", memory: 4Ti, pods: "200" }
  capacity: { cpu: "1000", memory: 4Ti, pods: "200" }
`;

await installCrd();
await kubectlOk(['apply', '-f', '-'], {
  input: Array.from({ length: NODES }, (_, i) => nodeYaml(i)).join('---\n'),
});
const ns = await testNamespace('bench-op');
const k = new Cluster(ns.name);
const catalog = {
  instanceTypes: DEFAULT_CATALOG.instanceTypes.map((t) =>
    t.id === 'nvidia-h100-80gb'
      ? { ...t, resourceName: 'cpu', nodeSelector: { 'berth.dev/bench-node': 'true' } }
      : t,
  ),
};
const fakeHub = await startFakeHub();
const op = await start(
  testConfig(ns.name, fakeHub.url, { catalog, leaderElection: false, concurrency: 8, logLevel: 'error' }),
);

const t0 = Date.now();
const names = Array.from({ length: N }, (_, i) => `endpt-bench-${i}`);
for (let i = 0; i < names.length; i += 25) {
  await Promise.all(
    names.slice(i, i + 25).map((n) =>
      k.create(n, {
        account: 'bench',
        model: { id: 'org/small' },
        hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      }),
    ),
  );
}
const created = Date.now() - t0;
let up = 0;
const deadline = Date.now() + 15 * 60_000;
while (Date.now() < deadline) {
  const list = (await k.custom.listNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace: ns.name,
    plural: PLURAL,
  })) as {
    items: DedicatedEndpoint[];
  };
  up = list.items.filter((e) => e.status?.phase === 'up').length;
  if (up === N) break;
  await new Promise((r) => setTimeout(r, 2000));
}
const allUp = Date.now() - t0;
global.gc?.();
const mem = process.memoryUsage();

// At rest: nothing changes; count the operator's requests over a minute.
await new Promise((r) => setTimeout(r, 10_000));
const before = requests;
await new Promise((r) => setTimeout(r, 60_000));
const atRest = requests - before;

const reconciles = (
  await op.metrics.registry.getSingleMetricAsString('berth_operator_reconciles_total')
).trim();
process.stdout.write(
  JSON.stringify(
    {
      endpoints: N,
      benchNodes: NODES,
      createdMs: created,
      up,
      allUpSeconds: +(allUp / 1000).toFixed(1),
      rssMiB: +(mem.rss / 2 ** 20).toFixed(0),
      heapUsedMiB: +(mem.heapUsed / 2 ** 20).toFixed(0),
      requestsAtRestPerMinute: atRest,
      totalRequests: requests,
      reconciles,
    },
    null,
    1,
  ) + '\n',
);

await op.stop();
await fakeHub.close();
await k.releaseAll();
await ns.remove();
await kubectlOk([
  'delete',
  'node',
  ...Array.from({ length: NODES }, (_, i) => `berth-bench-${i}`),
  '--wait=false',
]);
process.exit(0);
