// `npm run bench wake-under-load`: a wake's first step — from the request to a hibernated endpoint
// until its replica count is written — with 1,000 DedicatedEndpoints present on the real control plane.
//
// BENCH_WAKE_LOAD_ENDPOINTS endpoints (default 1,000) are created through the API (each a database row
// and a DedicatedEndpoint) in a namespace of its own, BENCH_WAKE_ENDPOINTS (10) of them to be woken
// and the rest asleep: their status is written as hibernated before the operator starts, as they
// would be after their idle timeout (starting 1,000 replicas first would take GPUs this cluster has
// not got). Then the operator starts (BERTH_CONCURRENCY's default 32, a resync of every endpoint every
// BENCH_WAKE_LOAD_RESYNC_S seconds, 60: five times the default's rate, so that wakes meet resyncs),
// reconciles all of them, and the woken endpoints go through BENCH_WAKE_N (100) wakes one at a time,
// as in `npm run bench wake`. The namespace is deleted at the end.
import os from 'node:os';
import {
  AppsV1Api,
  CustomObjectsApi,
  makeInformer,
  PatchStrategy,
  setHeaderOptions,
  type KubernetesObject,
  type V1Deployment,
} from '@kubernetes/client-node';
import { GROUP, LABEL_ENDPOINT, PLURAL, VERSION, type DedicatedEndpoint } from '@berth/crds';
import { kubeconfigPath, kubectl, loadKubeConfig, testNamespace } from '../cluster/env.ts';
import { patchEndpointSpec } from '../support/endpoint-spec.ts';
import { ADMIN_TOKEN, spawnApi, startTestApi } from '../support/api.ts';
import { createTestDatabase } from '../support/postgres.ts';
import { startFakeHub } from '../support/fake-hub.ts';
import { Cluster, installCrd, start, testConfig } from '../support/operator.ts';
import { servePodEngines } from '../support/pod-engines.ts';
import { machine, percentile } from './stats.ts';
import { operatorEnv, spawnOperator } from './wake-cluster.ts';
import {
  accountOn,
  create,
  cycle,
  directWake,
  ENDPOINTS,
  endpoint,
  f0,
  IDLE_S,
  poll,
  span,
  wakeOnce,
  WAKES,
  type WakeSample,
} from './wake-cycle.ts';

const TOTAL = Number(process.env.BENCH_WAKE_LOAD_ENDPOINTS ?? 1000);
const RESYNC_S = Number(process.env.BENCH_WAKE_LOAD_RESYNC_S ?? 60);
const CONCURRENCY = 32;

/**
 * When this process saw each endpoint's Deployment scaled up from zero (ms since the epoch): the
 * replica count written, as a watch delivers it. The receipt's scaledAt is the start of the
 * operator's pass that writes it; this is after the write, by the watch's delivery.
 */
function scaleWatch(namespace: string) {
  const kc = loadKubeConfig();
  const apps = kc.makeApiClient(AppsV1Api);
  const informer = makeInformer<V1Deployment & KubernetesObject>(
    kc,
    `/apis/apps/v1/namespaces/${namespace}/deployments`,
    () => apps.listNamespacedDeployment({ namespace, labelSelector: LABEL_ENDPOINT }),
    LABEL_ENDPOINT,
  );
  const replicas = new Map<string, number>();
  const scaled = new Map<string, number[]>();
  const onDeployment = (d: V1Deployment) => {
    const id = d.metadata?.labels?.[LABEL_ENDPOINT];
    if (!id) return;
    const n = d.spec?.replicas ?? 0;
    if (n > 0 && replicas.get(id) === 0) scaled.set(id, [...(scaled.get(id) ?? []), Date.now()]);
    replicas.set(id, n);
  };
  informer.on('add', onDeployment);
  informer.on('update', onDeployment);
  return {
    start: () => informer.start(),
    stop: () => informer.stop(),
    scaledAfter: (id: string, after: number) => scaled.get(id)?.find((at) => at >= after),
  };
}

/** Runs `fn` over `items`, `n` at a time. */
async function inParallel<T, R>(items: T[], n: number, fn: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!, i);
      }
    }),
  );
  return out;
}

export async function benchWakeLoad(): Promise<string[]> {
  if ((await kubectl(['get', 'nodes'], { timeoutMs: 10_000 }).catch(() => ({ code: 1 }))).code !== 0)
    return ['Skipped: no Kubernetes control plane (`npm run -s cluster:up`, then KUBECONFIG).'];
  await installCrd();
  const ns = await testNamespace('bench-wake-load');
  const k = new Cluster(ns.name);
  const custom = loadKubeConfig().makeApiClient(CustomObjectsApi);
  const hub = await startFakeHub();
  const engines = await servePodEngines(loadKubeConfig(), ns.name, { ttftMs: 0, itlMs: 0, outputTokens: 4 });
  const direct = await directWake();
  // As the chart runs them: the API and the operator each in a process of its own
  // (BENCH_WAKE_PROCESSES=one: both in this process, with the engines and the client).
  const separate = (process.env.BENCH_WAKE_PROCESSES ?? 'separate') !== 'one';
  const apiEnv = {
    ...direct.apiEnv,
    KUBECONFIG: kubeconfigPath(),
    BERTH_NAMESPACE: ns.name,
    PROXY_RETRIES: '0',
    WAKE_HOLD_TIMEOUT_MS: '90000',
    BERTH_QUOTA_ENDPOINTS: String(TOTAL + 10),
    BERTH_QUOTA_GPUS: String(TOTAL + 10),
  };
  const api = await (
    separate
      ? spawnApi({
          ...apiEnv,
          DATABASE_URL: (await createTestDatabase('bench_wake_load')).url,
          ADMIN_TOKEN,
          LOG_LEVEL: 'info', // spawnApi reads the port from the "listening" line
        })
      : startTestApi(apiEnv)
  ).catch(async (err: unknown) => {
    // Nothing of a failed start outlives the benchmark.
    await Promise.allSettled([engines.close(), hub.close(), ns.remove()]);
    throw err;
  });
  let op: { stop(): Promise<void> } | undefined;
  const watch = scaleWatch(ns.name);
  await watch.start();
  try {
    const keys = await accountOn(api.url);
    const spec = {
      model: 'org/small',
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      scaling: { idleTimeoutSeconds: IDLE_S },
    };
    const t0 = Date.now();
    const all = await inParallel(
      Array.from({ length: TOTAL }, (_, i) => i),
      8,
      () => create(api.url, keys, spec),
    );
    const created = Date.now() - t0;
    const woken = all.slice(0, ENDPOINTS);
    const asleep = all.slice(ENDPOINTS);
    for (const id of woken)
      await patchEndpointSpec(ns.name, id, {
        engine: { podAnnotations: { 'sim.berth.dev/ready-after': '1s' } },
      });
    // The sleepers: hibernated since a minute ago, their checks passed (generation 1).
    const since = new Date(Date.now() - 60_000).toISOString();
    await inParallel(asleep, 8, (name) =>
      custom.patchNamespacedCustomObjectStatus(
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
              message: `No traffic for ${IDLE_S}s; scaled to zero. The next request wakes it.`,
              observedGeneration: 1,
              replicas: 0,
              readyReplicas: 0,
              hibernatedAt: since,
              lastTransitionTime: since,
              preflightGeneration: 1,
            },
          },
        },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      ),
    );

    const t1 = Date.now();
    op = separate
      ? await spawnOperator(
          operatorEnv(ns.name, hub.url, direct, {
            BERTH_CONCURRENCY: String(CONCURRENCY),
            BERTH_RESYNC_SECONDS: String(RESYNC_S),
          }),
        )
      : await start(
          testConfig(ns.name, hub.url, {
            leaderElection: false,
            metricsPort: direct.port,
            ...(direct.on ? { wakeToken: direct.token } : {}),
            concurrency: CONCURRENCY,
            resyncSeconds: RESYNC_S,
          }),
        );
    // Settled: every endpoint reconciled (its Ready condition written), the woken ones up.
    await poll('all reconciled', 600_000, 2000, async () => {
      const list = (await custom.listNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace: ns.name,
        plural: PLURAL,
      })) as { items: DedicatedEndpoint[] };
      const done = list.items.filter((e) => e.status?.conditions?.length).length;
      return done >= TOTAL ? true : undefined;
    });
    const settled = Date.now() - t1;
    const { samples, failures } = await cycle(
      woken,
      async (id, s) => {
        const sample = await wakeOnce(api.url, keys, id, s);
        return { ...sample, scaleSeenAt: watch.scaledAfter(id, sample.sentAt) };
      },
      async (id) => {
        await poll('up', 180_000, 250, async () =>
          (await endpoint(api.url, keys, id)).status === 'up' ? true : undefined,
        );
      },
    );
    const phases = new Map<string, number>();
    const list = (await custom.listNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns.name,
      plural: PLURAL,
    })) as { items: DedicatedEndpoint[] };
    for (const e of list.items)
      phases.set(e.status?.phase ?? '–', (phases.get(e.status?.phase ?? '–') ?? 0) + 1);
    return [
      `${list.items.length} DedicatedEndpoints in the namespace (${[...phases].map(([p, n]) => `${n} ${p}`).join(', ')} at the end), created through the API in ${(created / 1000).toFixed(0)} s; the operator (concurrency ${CONCURRENCY}, every endpoint resynced every ${RESYNC_S} s) reconciled them all ${(settled / 1000).toFixed(0)} s after it started. ${samples.length} wakes of ${ENDPOINTS} of them (of ${WAKES} asked), one at a time, on kwok's H100 nodes; ${separate ? 'the operator and the API each in a process of its own (as the chart runs them), the engine simulators and this client in a third' : 'API, operator, engine simulators and this client in one Node process'}; ${direct.on ? 'the API tells the operator of each wake directly (POST /wake) besides the annotation' : 'the wake annotation alone (BENCH_WAKE_DIRECT=false)'}.`,
      '',
      ...loadRows(samples, failures),
    ];
  } finally {
    await watch.stop();
    await op?.stop();
    await api.stop();
    await engines.close();
    await hub.close();
    await k.releaseAll();
    await ns.remove();
  }
}

function loadRows(samples: (WakeSample & { scaleSeenAt?: number })[], failures: string[]): string[] {
  const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
  const signal = sorted(samples.map((s) => span(s.receipt.requestedAt, s.receipt.scaledAt)));
  const api = sorted(samples.map((s) => span(s.sentAt, s.receipt.requestedAt)));
  const pass = sorted(samples.map((s) => span(s.sentAt, s.receipt.scaledAt)));
  const unseen = samples.filter((s) => s.scaleSeenAt === undefined).length;
  const request = sorted(samples.flatMap((s) => (s.scaleSeenAt ? [s.scaleSeenAt - s.sentAt] : [])));
  const lost = samples.filter((s) => !s.ok).length;
  const line = (name: string, xs: number[], target: string) =>
    `| ${name} | ${f0(percentile(xs, 50))} | ${f0(percentile(xs, 99))} | ${f0(xs.at(-1)!)} | ${target} | ${percentile(xs, 99) <= 100 || !target ? (target ? 'met' : '') : '**missed**'} |`;
  return [
    '| ms, over the wakes | p50 | p99 | max | target (p99) | verdict |',
    '| --- | --- | --- | --- | --- | --- |',
    line('request sent → replica count written (seen by a Deployment watch)', request, '≤ 100'),
    line('request sent → the operator’s pass that writes it (receipt scaledAt)', pass, ''),
    line('of which: request sent → wake signal (the API)', api, ''),
    line('wake signal → that pass (receipt: requestedAt → scaledAt)', signal, ''),
    `| wakes / calls lost | ${samples.length} | ${lost} | | 0 lost | ${lost ? '**missed**' : 'met'} |`,
    ...(unseen ? ['', `${unseen} scale-ups not seen by the Deployment watch (left out of its row).`] : []),
    ...(failures.length
      ? ['', `Wakes not measured (${failures.length}): ${[...new Set(failures)].slice(0, 3).join('; ')}`]
      : []),
  ];
}

export async function benchWakeUnderLoad(): Promise<string> {
  const load = os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' / ');
  const started = new Date().toISOString().slice(0, 16).replace('T', ' ');
  const lines = await benchWakeLoad().catch((err: Error) => [`Failed: ${err.message}`]);
  return [
    `## Wake under load (\`npm run bench wake-under-load\`, ${started} UTC, ${machine()}, load average at start ${load})`,
    '',
    ...lines,
  ].join('\n');
}
