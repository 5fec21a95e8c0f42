// Benchmark: N endpoints reaching `up` on the kwok cluster, operator memory, API request rate at rest,
// against the control plane's own limit measured in the same run: N plain Deployments with the same
// pod template and their Services (built by the operator's own builders, created by the bench
// directly) to all-ready.
// Then a no-op resync of the N `up` endpoints: its duration and its writes (target: none).
// Usage: KUBECONFIG=… node --expose-gc --import tsx operator/bench/endpoints.ts [N]
// The baseline runs before and after Berth's phase (BERTH_BENCH_ORDER, below).
//
// Endpoints are created as the API creates them (lib.ts: the operator's finalizer already present).
// Both sides are timed with a watch (an informer), not by listing all N objects every few seconds:
// at 1,000 such a list is megabytes for the API server to encode and this process to decode, in the
// process the operator runs in. The operator's requests, writes by resource, passes and watch
// events are reported in total and per endpoint. 10,000 endpoints: hibernated.ts.
//
// The local cluster has 24 fake GPUs and 5 × 110 pod slots, so the bench adds tainted kwok nodes and
// runs the operator with a catalog whose `nvidia-h100-80gb` maps to 1 CPU on those nodes (the
// builders tolerate a taint keyed by the resource name). Everything it adds is removed at the end.
import { loadavg } from 'node:os';
import { DEFAULT_CATALOG, GROUP, PLURAL, VERSION } from '@berth/crds';
import type { DedicatedEndpoint } from '@berth/crds';
import { buildConfig, desiredDeployment, desiredService, reuseConnections } from '@berth/operator';
import type { KubernetesListObject, KubernetesObject, V1Deployment } from '@kubernetes/client-node';
import { DiscoveryV1Api } from '@kubernetes/client-node';
import { kubectlOk, testNamespace } from '@berth/test/cluster/env';
import { startFakeHub } from '@berth/test/support/fake-hub';
import { Cluster, installCrd, start, testConfig } from '@berth/test/support/operator';
import {
  apiserverProfile,
  controlPlaneRss,
  countRequests,
  createAsApi,
  etcdDbMiB,
  histogramSum,
  metric,
  metricBy,
  monitorPhase,
  noOpResync,
  pool,
  releaseAll,
  sleep,
  startCpuProfile,
  untilNoNamespaceTerminates,
  watchUntil,
} from './lib.ts';

const uptimeLoad = () => loadavg().map((l) => +l.toFixed(2));

const N = Number(process.argv[2] ?? 1000);
const NODES = Math.ceil(N / 100) + 1;

const requests = countRequests();

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

// An earlier run's namespaces are removed in the background; their teardown must not overlap this run.
const waitedForTeardown = await untilNoNamespaceTerminates();
const load = uptimeLoad();
await installCrd();
await kubectlOk(['apply', '-f', '-'], {
  input: Array.from({ length: NODES }, (_, i) => nodeYaml(i)).join('---\n'),
});
const ns = await testNamespace('bench-op');
const k = new Cluster(ns.name);
reuseConnections(k.kc); // the bench's own client too, on both sides alike
const catalog = {
  instanceTypes: DEFAULT_CATALOG.instanceTypes.map((t) =>
    t.id === 'nvidia-h100-80gb'
      ? { ...t, resourceName: 'cpu', nodeSelector: { 'berth.dev/bench-node': 'true' } }
      : t,
  ),
};
const fakeHub = await startFakeHub();
const RESYNC_SECONDS = 45;
const config = testConfig(ns.name, fakeHub.url, {
  catalog,
  leaderElection: false,
  concurrency: Number(process.env.BERTH_CONCURRENCY ?? 32), // the operator's default
  logLevel: 'error',
  resyncSeconds: RESYNC_SECONDS,
});

// Which phases run, in which order. `aba` (the default): the baseline, Berth's, then the baseline
// again once Berth's endpoints are deleted, their children gone and the operator stopped; the ratio
// is reported against each baseline and against their mean. On this machine the same baseline took
// 15-20 % more or less time after Berth's phase than before it, in either direction from run to run
// (BENCHMARKS.md), so a ratio to one baseline alone moves with when it ran.
// `baseline-first`: the baseline, then Berth's (about 3 minutes shorter at N = 1,000).
const ORDER = process.env.BERTH_BENCH_ORDER ?? 'aba';
if (ORDER !== 'baseline-first' && ORDER !== 'aba') {
  throw new Error(`BERTH_BENCH_ORDER must be baseline-first or aba, not ${JSON.stringify(ORDER)}`);
}

/** Whether any Deployment, ReplicaSet, pod, Service or EndpointSlice (and custom resource) is left. */
async function anyLeft(c: Cluster): Promise<boolean> {
  const one = { namespace: c.namespace, limit: 1 };
  const lists = await Promise.all([
    c.apps.listNamespacedDeployment(one),
    c.apps.listNamespacedReplicaSet(one),
    c.core.listNamespacedPod(one),
    c.core.listNamespacedService(one),
    c.kc.makeApiClient(DiscoveryV1Api).listNamespacedEndpointSlice(one),
    c.custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, plural: PLURAL, ...one }),
  ]).catch(() => undefined);
  return !lists || lists.some((l) => (l as { items: unknown[] }).items.length > 0);
}

/** Waits (up to 10 min) until nothing of a phase is left in its namespace; the seconds it took. */
async function untilGone(c: Cluster, t0: number): Promise<number> {
  for (let i = 0; i < 300 && (await anyLeft(c)); i++) await sleep(2000);
  return +((Date.now() - t0) / 1000).toFixed(1);
}

// The baseline: N Deployments with the pod template the operator would build for these endpoints,
// created in batches of 25 as the endpoints are below, timed to all-ready; then removed.
const instanceType = catalog.instanceTypes.find((t) => t.id === 'nvidia-h100-80gb')!;
const build = buildConfig(config); // what the operator's builders get
const baseNamespaces: { remove: () => Promise<void> }[] = [];
async function baselinePhase(label: string) {
  const base = await testNamespace('bench-base');
  baseNamespaces.push(base);
  const baseCluster = new Cluster(base.name);
  reuseConnections(baseCluster.kc);
  const baseMon = await monitorPhase();
  const profile = apiserverProfile(label);
  const tb = Date.now();
  for (let i = 0; i < N; i += 25) {
    await Promise.all(
      Array.from({ length: Math.min(25, N - i) }, (_, j) => {
        const ep = {
          apiVersion: 'berth.dev/v1alpha1',
          kind: 'DedicatedEndpoint',
          metadata: { name: `endpt-base-${i + j}`, namespace: base.name, uid: 'bench', generation: 1 },
          spec: {
            account: 'bench',
            model: { id: 'org/small' },
            hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
            authMode: 'Private',
            scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 300 },
          },
        } as unknown as DedicatedEndpoint;
        const d = desiredDeployment(ep, instanceType, build, 1);
        const svc = desiredService(ep);
        // No owner: the garbage collector would remove objects whose owner does not exist.
        delete d.metadata!.ownerReferences;
        delete svc.metadata!.ownerReferences;
        // What serving a model takes without Berth: the Deployment and the Service in front of it.
        return Promise.all([
          baseCluster.apps.createNamespacedDeployment({ namespace: base.name, body: d }),
          baseCluster.core.createNamespacedService({ namespace: base.name, body: svc }),
        ]);
      }),
    );
  }
  const ready = await watchUntil(
    baseCluster.kc,
    `/apis/apps/v1/namespaces/${base.name}/deployments`,
    () => baseCluster.apps.listNamespacedDeployment({ namespace: base.name }),
    (d: V1Deployment) => (d.status?.readyReplicas ?? 0) >= 1,
    N,
    15 * 60_000,
    baseMon.progress,
  );
  const readyMs = Date.now() - tb;
  const phase = await baseMon.end();
  // The baseline's objects are removed, and the control plane done with removing them, before the
  // next phase: its Deployments and Services deleted directly, then waiting until no Deployment,
  // ReplicaSet, pod, Service or EndpointSlice of it is left. (Deleting the namespace instead let its
  // teardown run through Berth's phase: the namespace controller backs off between attempts, and the
  // Deployment controller kept trying to create ReplicaSets in the terminating namespace, minutes
  // long.) The namespace itself, with its Events, goes at the end.
  const tTeardown = Date.now();
  await baseCluster.apps.deleteCollectionNamespacedDeployment({
    namespace: base.name,
    propagationPolicy: 'Background',
  });
  await baseCluster.core.deleteCollectionNamespacedService({ namespace: base.name });
  const teardownSeconds = await untilGone(baseCluster, tTeardown);
  return { ready, readyMs, phase, teardownSeconds, profile };
}

const baseline = await baselinePhase('baseline');

// Only the operator's own requests from here on (the bench's own are subtracted below).
requests.reset();
const op = await start(config);
const berthMon = await monitorPhase();
const berthProfile = apiserverProfile('berth');
// BERTH_BENCH_CPU_PROFILE=file.cpuprofile: a CPU profile of this process during Berth's phase only.
const stopProfile = process.env.BERTH_BENCH_CPU_PROFILE
  ? await startCpuProfile(process.env.BERTH_BENCH_CPU_PROFILE)
  : undefined;

const t0 = Date.now();
// The bench's own requests (its creates and its watch), subtracted from the operator's count.
let benchOwn = N;
const names = Array.from({ length: N }, (_, i) => `endpt-bench-${i}`);
for (let i = 0; i < names.length; i += 25) {
  await Promise.all(
    names.slice(i, i + 25).map((n) =>
      createAsApi(k, n, {
        account: 'bench',
        model: { id: 'org/small' },
        hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      }),
    ),
  );
}
const created = Date.now() - t0;
const up = await watchUntil(
  k.kc,
  `/apis/${GROUP}/${VERSION}/namespaces/${ns.name}/${PLURAL}`,
  () =>
    k.custom.listNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns.name,
      plural: PLURAL,
    }) as Promise<KubernetesListObject<KubernetesObject & { status?: { phase?: string } }>>,
  (e) => e.status?.phase === 'up',
  N,
  15 * 60_000,
  berthMon.progress,
);
benchOwn += 2; // its watch: one list, one watch request
const allUp = Date.now() - t0;
await stopProfile?.();
const berthPhase = await berthMon.end();
await Promise.all([baseline.profile, berthProfile]);
// Little's law: the mean number of passes in flight is the passes' total time over the wall time.
const passSeconds = await histogramSum(op, 'berth_operator_reconcile_duration_seconds');
// What it took the operator to bring the N up (requests: the operator's own, the bench's subtracted).
const toUp = {
  requests: requests.count - benchOwn,
  passes: await metric(op, 'berth_operator_reconciles_total'),
  writes: await metricBy(op, 'berth_operator_api_writes_total', 'resource'),
  watchEvents: await metricBy(op, 'berth_operator_watch_events_total', 'outcome'),
};
const perEndpoint = (v: number) => +(v / N).toFixed(2);
global.gc?.();
const mem = process.memoryUsage();
const controlPlane = controlPlaneRss();
const etcdMiB = await etcdDbMiB();

// At rest: nothing changes; count the operator's requests over a minute.
await new Promise((r) => setTimeout(r, 10_000));
const before = requests.count;
const writesBefore = await metric(op, 'berth_operator_api_writes_total');
await new Promise((r) => setTimeout(r, 60_000));
const atRest = requests.count - before;
const writesAtRest = (await metric(op, 'berth_operator_api_writes_total')) - writesBefore;

const reconciles = (
  await op.metrics.registry.getSingleMetricAsString('berth_operator_reconciles_total')
).trim();

// A no-op resync: the periodic resync puts every endpoint on the queue while nothing changed.
const resync = await noOpResync(op, requests, N, RESYNC_SECONDS, 50);

// ORDER=aba: Berth's endpoints deleted as a user deletes them (the operator removes its finalizer,
// the garbage collector their children), the operator stopped once nothing is left, then the
// baseline again on the control plane Berth's phase leaves behind.
let after: Awaited<ReturnType<typeof baselinePhase>> | undefined;
let berthTeardownSeconds: number | undefined;
let stopped = false;
if (ORDER === 'aba') {
  const t = Date.now();
  // One DELETE per endpoint, 32 at a time (a deleteCollection of 1,000 ran into the API server's
  // 60 s request timeout once).
  await pool(names, 32, (name) =>
    k.delete(name).catch((e: { code?: number }) => {
      if (e.code !== 404) throw e;
    }),
  );
  berthTeardownSeconds = await untilGone(k, t);
  await op.stop();
  stopped = true;
  after = await baselinePhase('baseline-after');
  await after.profile;
}
// A phase that timed out (seen once: a ReplicaSet whose pod was ready kept reporting 0 ready for
// 15 minutes) makes its ratios meaningless: they are null, and `incomplete` says why.
const incomplete = [
  ...(up < N ? [`Berth: ${up} of ${N} endpoints up`] : []),
  ...(baseline.ready < N ? [`baseline: ${baseline.ready} of ${N} Deployments ready`] : []),
  ...(after && after.ready < N ? [`baseline after: ${after.ready} of ${N} Deployments ready`] : []),
];
const ratio = (ms: number) => (incomplete.length ? null : +(allUp / ms).toFixed(2));
process.stdout.write(
  JSON.stringify(
    {
      endpoints: N,
      loadAverageAtStart: load,
      waitedForEarlierTeardownSeconds: waitedForTeardown,
      concurrency: config.concurrency,
      benchNodes: NODES,
      order: ORDER,
      ...(incomplete.length && { incomplete }),
      baselineDeploymentsReady: baseline.ready,
      baselineAllReadySeconds: +(baseline.readyMs / 1000).toFixed(1),
      baselineTeardownSeconds: baseline.teardownSeconds,
      ratioToBaseline: ratio(baseline.readyMs),
      ...(after && {
        berthTeardownSeconds,
        baselineAfterDeploymentsReady: after.ready,
        baselineAfterAllReadySeconds: +(after.readyMs / 1000).toFixed(1),
        baselineAfterTeardownSeconds: after.teardownSeconds,
        ratioToBaselineAfter: ratio(after.readyMs),
        ratioToBaselineMean: ratio((baseline.readyMs + after.readyMs) / 2),
      }),
      createdMs: created,
      up,
      allUpSeconds: +(allUp / 1000).toFixed(1),
      rssMiB: +(mem.rss / 2 ** 20).toFixed(0),
      heapUsedMiB: +(mem.heapUsed / 2 ** 20).toFixed(0),
      requestsAtRestPerMinute: atRest,
      writesAtRestPerMinute: writesAtRest,
      toUp,
      perEndpoint: {
        requests: perEndpoint(toUp.requests),
        passes: perEndpoint(toUp.passes),
        ...Object.fromEntries(Object.entries(toUp.writes).map(([r, v]) => [`${r}Writes`, perEndpoint(v)])),
      },
      controlPlaneRssMiB: controlPlane,
      etcdDbMiB: etcdMiB,
      totalRequests: requests.count,
      reconciles,
      noOpResync: resync,
      passes: {
        meanSeconds: +(passSeconds.sum / (passSeconds.count || 1)).toFixed(3),
        meanInFlight: +(passSeconds.sum / (allUp / 1000)).toFixed(1),
      },
      phases: { baseline: baseline.phase, berth: berthPhase, ...(after && { baselineAfter: after.phase }) },
    },
    null,
    1,
  ) + '\n',
);

if (!stopped) await op.stop();
await fakeHub.close();
await releaseAll(k);
await ns.remove();
for (const b of baseNamespaces) await b.remove();
await kubectlOk([
  'delete',
  'node',
  ...Array.from({ length: NODES }, (_, i) => `berth-bench-${i}`),
  '--wait=false',
]);
process.exit(0);
