// Benchmark: N hibernated endpoints under one operator, and a no-op resync over all of them.
// Usage: KUBECONFIG=… node --expose-gc --import tsx operator/bench/hibernated.ts [N]
//
// Endpoints with pods do not fit on this machine by the thousands; hibernated ones do (scale to
// zero: a Deployment at 0 replicas and a Service each, no pods). The state measured is an operator
// (re)starting over N endpoints that went idle long ago and have not changed since — an upgrade or
// a failover of the operator — and then its periodic resync:
// 1. a sample endpoint is created as the API does (minReplicas 0) with the status of a hibernated
//    one, and an operator converges it (Deployment at 0, Service, status completed), then stops;
// 2. the other N - 1 are seeded with what the operator keeps for such an endpoint, written the way
//    it writes it (server-side apply under its field manager): the endpoint as the API creates it,
//    the sample's status, the Deployment at 0 and the Service from the operator's own builders;
// 3. a new operator starts over all N: its first pass over each is a resync where nothing changed:
//    time to N passes, writes (target: none), requests, memory; then the periodic resync the same.
// If the seeding differed from what the operator would write, its passes write and the bench shows
// it. Everything it created is removed at the end (the namespace, after the finalizers are dropped).
import { loadavg } from 'node:os';
import { GROUP, PLURAL, VERSION } from '@berth/crds';
import type { DedicatedEndpointSpecInput } from '@berth/crds';
import { buildConfig, desiredDeployment, desiredService, reuseConnections } from '@berth/operator';
import { driftOf } from '../src/k8s/drift.ts';
import type { DedicatedEndpoint } from '@berth/crds';
import { API_VERSION, DEFAULT_CATALOG, FIELD_MANAGER, KIND } from '@berth/crds';
import { KubernetesObjectApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { kubectl, testNamespace } from '@berth/test/cluster/env';
import { startFakeHub } from '@berth/test/support/fake-hub';
import { Cluster, installCrd, start, testConfig } from '@berth/test/support/operator';
import {
  controlPlaneRss,
  countRequests,
  createAsApi,
  etcdDbMiB,
  metric,
  metricBy,
  mib,
  noOpResync,
  pool,
  releaseAll,
  sleep,
} from './lib.ts';

const N = Number(process.argv[2] ?? 10_000);
const RESYNC_SECONDS = Number(process.env.BERTH_RESYNC_SECONDS ?? 120);
const ETCD_LIMIT_MIB = 1536; // of its 2 GiB quota: stop and clean up before the shared cluster runs out
const requests = countRequests();
const loadAtStart = loadavg().map((l) => +l.toFixed(2));
const log = (msg: string, extra: unknown = {}) =>
  process.stderr.write(`${new Date().toISOString()} ${msg} ${JSON.stringify(extra)}\n`);

await installCrd();
const ns = await testNamespace('bench-opscale');
const k = new Cluster(ns.name);
reuseConnections(k.kc);
const fakeHub = await startFakeHub();
const config = testConfig(ns.name, fakeHub.url, {
  leaderElection: false,
  concurrency: Number(process.env.BERTH_CONCURRENCY ?? 32), // the operator's default
  logLevel: (process.env.BERTH_BENCH_LOG_LEVEL ?? 'error') as 'error',
  resyncSeconds: RESYNC_SECONDS,
});
const controlPlaneBefore = controlPlaneRss();
const etcdBefore = await etcdDbMiB();
log('start', { N, namespace: ns.name, loadAtStart, controlPlaneBefore, etcdBefore });

const out: Record<string, unknown> = { endpoints: N, loadAverageAtStart: loadAtStart, namespace: ns.name };
let op: Awaited<ReturnType<typeof start>> | undefined;
try {
  const spec: DedicatedEndpointSpecInput = {
    account: 'bench',
    model: { id: 'org/small' },
    hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
    scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 300 },
  };
  const names = Array.from({ length: N }, (_, i) => `endpt-hib-${i}`);
  const objects = KubernetesObjectApi.makeApiClient(k.kc);
  const ssa = (obj: Parameters<KubernetesObjectApi['patch']>[0]) =>
    objects.patch(obj, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
  const hibernatedAt = new Date().toISOString();
  const hibernate = (name: string, status: Record<string, unknown>) =>
    k.custom.patchNamespacedCustomObjectStatus(
      { group: GROUP, version: VERSION, namespace: ns.name, plural: PLURAL, name, body: { status } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
  const getEndpoint = async (name: string) =>
    (await k.custom.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns.name,
      plural: PLURAL,
      name,
    })) as DedicatedEndpoint;

  // 1. The sample: what the operator keeps for a hibernated endpoint, from the operator itself.
  await createAsApi(k, names[0]!, spec);
  await hibernate(names[0]!, {
    phase: 'hibernated',
    reason: 'IdleTimeout',
    message: 'No traffic for 300s; scaled to zero. The next request wakes it.',
    observedGeneration: 1,
    preflightGeneration: 1,
    hibernatedAt,
  });
  const sampler = await start(config);
  for (let i = 0; i < 600; i++) {
    await sleep(100);
    if ((await metric(sampler, 'berth_operator_api_writes_total')) >= 3) break;
  }
  await sleep(3000); // the echo of its own writes, and anything after
  out.sample = { writes: await metricBy(sampler, 'berth_operator_api_writes_total', 'resource') };
  await sampler.stop();
  const sample = await getEndpoint(names[0]!);
  const status = sample.status as Record<string, unknown>;
  if (status.phase !== 'hibernated') throw new Error(`the sample is ${String(status.phase)}, not hibernated`);
  log('sample', { status, writes: out.sample });

  // 2. The others, seeded as the operator would have left them.
  const instanceType = DEFAULT_CATALOG.instanceTypes.find((t) => t.id === spec.hardware.gpuType)!;
  const build = buildConfig(config); // what the operator's builders get
  const tc = Date.now();
  let seeded = 0;
  await pool(names.slice(1), 32, async (name) => {
    await createAsApi(k, name, spec);
    await k.custom.patchNamespacedCustomObjectStatus(
      {
        group: GROUP,
        version: VERSION,
        namespace: ns.name,
        plural: PLURAL,
        name,
        body: {
          apiVersion: API_VERSION,
          kind: KIND,
          metadata: { name, namespace: ns.name },
          // the sample's, with its own name (its Service URL)
          status: JSON.parse(JSON.stringify(status).replaceAll(names[0]!, name)) as unknown,
        },
        fieldManager: FIELD_MANAGER,
        force: true,
      },
      setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply),
    );
    const ep = await getEndpoint(name);
    await Promise.all([ssa(desiredService(ep)), ssa(desiredDeployment(ep, instanceType, build, 0))]);
    if (++seeded % 1000 === 0) log('seeded', { seeded, etcd: await etcdDbMiB() });
  });
  out.seededSeconds = +((Date.now() - tc) / 1000).toFixed(1);
  // The seeding is what the operator would have written: its own drift check finds nothing.
  for (const name of [names[1], names[Math.floor(N / 2)], names[N - 1]]) {
    if (!name) continue;
    const ep = await getEndpoint(name);
    const [svc, dep] = await Promise.all([
      k.core.readNamespacedService({ name, namespace: ns.name }),
      k.apps.readNamespacedDeployment({ name, namespace: ns.name }),
    ]);
    const drift = {
      service: driftOf(desiredService(ep), svc),
      deployment: driftOf(desiredDeployment(ep, instanceType, build, 0), dep),
    };
    if (drift.service || drift.deployment) log('seeded object differs', { name, drift });
  }
  log('seeded', { seconds: out.seededSeconds, etcd: await etcdDbMiB() });
  // The control plane's own work on the seeded objects (ReplicaSets, EndpointSlices) settles first.
  await sleep(30_000);

  global.gc?.();
  const benchAlone = process.memoryUsage();

  // 3. The operator starts over them: its informers list everything, then a pass over each.
  requests.reset();
  const t0 = Date.now();
  op = await start(config);
  const peak: Record<string, number> = {};
  let etcdPeak = 0;
  let passes = 0;
  for (let i = 0; Date.now() - t0 < 20 * 60_000; i++) {
    await sleep(200);
    passes = await metric(op, 'berth_operator_reconciles_total');
    if (passes >= N) break;
    if (i % 50 === 0) {
      for (const [c, v] of Object.entries(controlPlaneRss())) peak[c] = Math.max(peak[c] ?? 0, v);
      const etcd = await etcdDbMiB();
      etcdPeak = Math.max(etcdPeak, etcd ?? 0);
      log('starting', { passes, writes: await metric(op, 'berth_operator_api_writes_total'), etcd });
      if (etcd && etcd > ETCD_LIMIT_MIB) throw new Error(`etcd's database reached ${etcd} MiB; stopping`);
    }
  }
  const firstPasses = Date.now() - t0;
  await sleep(10_000); // anything the passes caused (watch echoes of writes, if any)
  out.start = {
    secondsToNPasses: +(firstPasses / 1000).toFixed(1),
    passes: await metric(op, 'berth_operator_reconciles_total'),
    writes: await metricBy(op, 'berth_operator_api_writes_total', 'resource'),
    requests: requests.count,
    watchEvents: await metricBy(op, 'berth_operator_watch_events_total', 'outcome'),
    errors: await metricBy(op, 'berth_operator_errors_total', 'where'),
  };
  log('started', out.start);
  const phases = (
    (await k.custom.listNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns.name,
      plural: PLURAL,
    })) as { items: { status?: { phase?: string; conditions?: unknown[] } }[] }
  ).items;
  out.hibernatedWithConditions = phases.filter(
    (e) => e.status?.phase === 'hibernated' && e.status.conditions?.length,
  ).length;

  global.gc?.();
  const mem = process.memoryUsage();
  out.memoryMiB = {
    heapUsedBenchAlone: mib(benchAlone.heapUsed),
    rssBenchAlone: mib(benchAlone.rss),
    heapUsed: mib(mem.heapUsed),
    rss: mib(mem.rss),
    operatorHeap: mib(mem.heapUsed - benchAlone.heapUsed),
  };
  out.controlPlaneRssMiB = {
    before: controlPlaneBefore,
    peakWhileStarting: peak,
    after: controlPlaneRss(),
  };
  out.etcdDbMiB = { before: etcdBefore, peak: etcdPeak, after: await etcdDbMiB() };

  // The no-op resync: from its first pass to its N-th, with nothing changed.
  out.noOpResync = {
    ...(await noOpResync(op, requests, N, RESYNC_SECONDS, 200)),
    rssMiB: mib(process.memoryUsage().rss),
  };
  log('resync', out.noOpResync);
} finally {
  // Clean up whatever happened: stop the operator, drop the finalizers, remove the namespace.
  await op?.stop().catch(() => {});
  await fakeHub.close();
  const tr = Date.now();
  await releaseAll(k).catch((err: unknown) => log('release failed', { err: String(err) }));
  await ns.remove();
  let gone = false;
  for (let i = 0; i < 300 && !gone; i++) {
    gone = (await kubectl(['get', 'namespace', ns.name, '-o', 'name'])).code !== 0;
    if (!gone) await sleep(2000);
  }
  out.cleanup = { namespaceGone: gone, seconds: +((Date.now() - tr) / 1000).toFixed(1) };
  out.etcdDbMiBAfterCleanup = await etcdDbMiB();
  out.controlPlaneRssMiBAfterCleanup = controlPlaneRss();
  process.stdout.write(JSON.stringify(out, null, 1) + '\n');
}
process.exit(0);
