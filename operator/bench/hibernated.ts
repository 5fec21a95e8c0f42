// Benchmark: N hibernated endpoints under one operator, and a no-op resync over all of them.
// Usage: KUBECONFIG=… node --expose-gc --import tsx operator/bench/hibernated.ts [N]
//
// Endpoints with pods do not fit on this machine by the thousands; hibernated ones do (scale to
// zero: a Deployment at 0 replicas and a Service each, no pods). The bench creates N endpoints as
// the API does (lib.ts), with minReplicas 0, and gives each the status the operator keeps for a
// hibernated endpoint (phase hibernated, hibernatedAt, the checks passed for generation 1): the
// state after an operator restart over endpoints that had gone idle. Then it starts the operator
// over them and times its convergence (its first pass over each: Deployment at 0 and Service
// applied, status completed); then a no-op resync (the periodic resync with nothing changed): its
// duration, its writes (target: none), its requests, and the operator's memory. Everything it
// created is removed at the end (the namespace, after the finalizers are dropped).
import { loadavg } from 'node:os';
import { GROUP, PLURAL, VERSION } from '@berth/crds';
import type { DedicatedEndpointSpecInput } from '@berth/crds';
import { reuseConnections } from '@berth/operator';
import { PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
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
  logLevel: 'error',
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
  const tc = Date.now();
  await pool(names, 32, (n) => createAsApi(k, n, spec));
  const hibernatedAt = new Date().toISOString();
  await pool(names, 32, (name) =>
    k.custom.patchNamespacedCustomObjectStatus(
      {
        group: GROUP,
        version: VERSION,
        namespace: ns.name,
        plural: PLURAL,
        name,
        body: {
          status: {
            phase: 'hibernated',
            reason: 'IdleTimeout',
            message: 'No traffic for 300s; scaled to zero. The next request wakes it.',
            observedGeneration: 1,
            preflightGeneration: 1,
            hibernatedAt,
          },
        },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    ),
  );
  out.createdSeconds = +((Date.now() - tc) / 1000).toFixed(1);
  log('created', { seconds: out.createdSeconds, etcd: await etcdDbMiB() });

  global.gc?.();
  const benchAlone = process.memoryUsage();

  // The operator starts over them: list, then a first pass over each.
  requests.reset();
  const t0 = Date.now();
  op = await start(config);
  let lastWrites = 0;
  let lastWriteAt = Date.now();
  const peak: Record<string, number> = {};
  let etcdPeak = 0;
  for (let i = 0; Date.now() - t0 < 40 * 60_000; i++) {
    await sleep(1000);
    const writes = await metric(op, 'berth_operator_api_writes_total');
    if (writes !== lastWrites) {
      lastWrites = writes;
      lastWriteAt = Date.now();
    }
    if (i % 10 === 0) {
      for (const [c, v] of Object.entries(controlPlaneRss())) peak[c] = Math.max(peak[c] ?? 0, v);
      const etcd = await etcdDbMiB();
      etcdPeak = Math.max(etcdPeak, etcd ?? 0);
      log('converging', { writes, passes: await metric(op, 'berth_operator_reconciles_total'), etcd });
      if (etcd && etcd > ETCD_LIMIT_MIB) throw new Error(`etcd's database reached ${etcd} MiB; stopping`);
    }
    // Converged: every endpoint's Deployment, Service and status written, and nothing written for 20 s.
    if (lastWrites >= 3 * N && Date.now() - lastWriteAt > 20_000) break;
  }
  const writesToConverge = await metricBy(op, 'berth_operator_api_writes_total', 'resource');
  out.converge = {
    seconds: +((lastWriteAt - t0) / 1000).toFixed(1),
    passes: await metric(op, 'berth_operator_reconciles_total'),
    writes: writesToConverge,
    requests: requests.count,
    watchEvents: await metricBy(op, 'berth_operator_watch_events_total', 'outcome'),
    errors: await metricBy(op, 'berth_operator_errors_total', 'where'),
  };
  log('converged', out.converge);
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
    peakWhileConverging: peak,
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
