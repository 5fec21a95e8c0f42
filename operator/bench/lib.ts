// Shared parts of the operator benchmarks (endpoints.ts, hibernated.ts); the control plane's
// processes, measured, in ./procs.ts.
import { spawn } from 'node:child_process';
import { createWriteStream, writeFileSync } from 'node:fs';
import * as inspector from 'node:inspector/promises';
import { createRequire } from 'node:module';
import type { DedicatedEndpointSpecInput } from '@berth/crds';
import { ANNOTATION_DISPLAY_NAME, API_VERSION, FINALIZER, GROUP, KIND, PLURAL, VERSION } from '@berth/crds';
import type { OperatorHandle } from '@berth/operator';
import type { KubeConfig, KubernetesListObject, KubernetesObject } from '@kubernetes/client-node';
import { makeInformer } from '@kubernetes/client-node';
import { kubeconfigPath, kubectlOk, kubectlPath } from '@berth/test/cluster/env';
import type { Cluster } from '@berth/test/support/operator';

import { cpuBetween, cpuSnapshot } from './procs.ts';

export * from './procs.ts';

/** Every HTTP request this process's Kubernetes client makes (client-node's own undici), counted. */
export function countRequests(): { readonly count: number; reset(): void } {
  const requireFromClient = createRequire(createRequire(import.meta.url).resolve('@kubernetes/client-node'));
  const undici = requireFromClient('undici') as {
    Agent: { prototype: { dispatch: (...a: unknown[]) => unknown } };
  };
  let n = 0;
  const dispatch = undici.Agent.prototype.dispatch;
  undici.Agent.prototype.dispatch = function (this: unknown, ...args: unknown[]) {
    n++;
    return dispatch.apply(this, args);
  };
  return {
    get count() {
      return n;
    },
    reset() {
      n = 0;
    },
  };
}

/**
 * Creates an endpoint the way the API does (apps/api/src/endpoints/kubernetes/endpoints.ts): the
 * display-name annotation and the operator's finalizer present from the start. The API's billing
 * finalizer is left out: only the API's GPU meter touches it, and no API runs here.
 */
export async function createAsApi(k: Cluster, name: string, spec: DedicatedEndpointSpecInput): Promise<void> {
  await k.custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace: k.namespace,
    plural: PLURAL,
    body: {
      apiVersion: API_VERSION,
      kind: KIND,
      metadata: { name, annotations: { [ANNOTATION_DISPLAY_NAME]: name }, finalizers: [FINALIZER] },
      spec,
    },
  });
}

/** Runs `fn` over `items`, at most `n` at a time. */
export async function pool<T>(items: readonly T[], n: number, fn: (t: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, items.length) }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

/** A counter's sum over its labels, or per label value of `by`. */
export async function metric(op: OperatorHandle, name: string): Promise<number> {
  return (
    (await op.metrics.registry.getMetricsAsJSON())
      .find((m) => m.name === name)
      ?.values.reduce((sum, v) => sum + Number(v.value), 0) ?? 0
  );
}

/**
 * A no-op resync: the periodic resync (every `resyncSeconds`) puts each of the `n` endpoints on the
 * queue while nothing changed. From its first pass to its n-th: the duration, the writes it made
 * (should be none), the Kubernetes requests, and the heap's peak meanwhile. Polls every `idleMs`
 * until the first pass, then every 20 ms.
 */
export async function noOpResync(
  op: OperatorHandle,
  requests: { readonly count: number },
  n: number,
  resyncSeconds: number,
  idleMs: number,
): Promise<{
  passes: number;
  seconds: number | null;
  writes: number;
  requests: number;
  heapPeakMiB: number;
}> {
  const passes0 = await metric(op, 'berth_operator_reconciles_total');
  const writes0 = await metric(op, 'berth_operator_api_writes_total');
  const requests0 = requests.count;
  let start = 0;
  let end = 0;
  let heapPeak = 0;
  const deadline = Date.now() + (resyncSeconds + 600) * 1000;
  while (Date.now() < deadline) {
    const passes = (await metric(op, 'berth_operator_reconciles_total')) - passes0;
    if (passes > 0 && !start) start = Date.now();
    if (start) heapPeak = Math.max(heapPeak, process.memoryUsage().heapUsed);
    if (passes >= n) {
      end = Date.now();
      break;
    }
    await sleep(passes > 0 ? 20 : idleMs);
  }
  return {
    passes: (await metric(op, 'berth_operator_reconciles_total')) - passes0,
    seconds: end ? +((end - start) / 1000).toFixed(2) : null,
    writes: (await metric(op, 'berth_operator_api_writes_total')) - writes0,
    requests: requests.count - requests0,
    heapPeakMiB: mib(heapPeak),
  };
}

/** A histogram's sum and count (over its labels). */
export async function histogramSum(
  op: OperatorHandle,
  name: string,
): Promise<{ sum: number; count: number }> {
  const values = (await op.metrics.registry.getMetricsAsJSON()).find((m) => m.name === name)?.values ?? [];
  const total = (suffix: string) =>
    values
      .filter((v) => (v as { metricName?: string }).metricName === `${name}${suffix}`)
      .reduce((s, v) => s + Number(v.value), 0);
  return { sum: total('_sum'), count: total('_count') };
}

export async function metricBy(
  op: OperatorHandle,
  name: string,
  by: string,
): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await op.metrics.registry.getMetricsAsJSON()).find((m) => m.name === name)?.values ?? [])
    out[String(v.labels[by])] = (out[String(v.labels[by])] ?? 0) + Number(v.value);
  return out;
}

export const diff = (after: Record<string, number>, before: Record<string, number>) =>
  Object.fromEntries(Object.entries(after).map(([k, v]) => [k, v - (before[k] ?? 0)]));

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const mib = (bytes: number) => Math.round(bytes / 2 ** 20);

/**
 * Drops every finalizer of the endpoints left in the namespace, `n` at a time (the operator is
 * stopped by then; without this the namespace would wait for it forever).
 */
export async function releaseAll(k: Cluster, n = 32): Promise<void> {
  const list = (await k.custom.listNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace: k.namespace,
    plural: PLURAL,
  })) as { items: { metadata: { name: string; finalizers?: string[] } }[] };
  await pool(
    list.items.filter((e) => e.metadata.finalizers?.length),
    n,
    (e) => k.mergePatch(e.metadata.name, { metadata: { finalizers: null } }).catch(() => {}),
  );
}

/**
 * Waits until `n` objects of a watched collection satisfy `done` (an informer: the API server sends
 * changes, not the whole list every poll, so watching costs both sides little). Resolves with how
 * many did, at the deadline at the latest. `progress` gets a function that tells how many do so far.
 */
export async function watchUntil<T extends KubernetesObject>(
  kc: KubeConfig,
  path: string,
  list: () => Promise<KubernetesListObject<T>>,
  done: (o: T) => boolean,
  n: number,
  timeoutMs: number,
  progress?: (done: () => number) => void,
): Promise<number> {
  const informer = makeInformer<T>(kc, path, list);
  const ok = new Set<string>();
  progress?.(() => ok.size);
  let finish!: () => void;
  const finished = new Promise<void>((r) => (finish = r));
  const see = (o: T) => {
    const name = o.metadata?.name ?? '';
    if (done(o)) ok.add(name);
    else ok.delete(name);
    if (ok.size >= n) finish();
  };
  informer.on('add', see);
  informer.on('update', see);
  informer.on('delete', (o) => ok.delete(o.metadata?.name ?? ''));
  await informer.start();
  const timer = setTimeout(finish, timeoutMs);
  await finished;
  clearTimeout(timer);
  await informer.stop();
  return ok.size;
}

/**
 * The API server's request counters (apiserver_request_total) and the time it spent serving them
 * (apiserver_request_duration_seconds_sum, watches excluded), summed by `verb resource[/subresource]`,
 * from its /metrics (one kubectl call: cheap next to a phase of thousands of requests).
 */
export async function apiserverRequests(): Promise<Record<string, { n: number; s: number }>> {
  const text = await kubectlOk(['get', '--raw', '/metrics']).catch(() => '');
  const out: Record<string, { n: number; s: number }> = {};
  for (const line of text.split('\n')) {
    const total = line.startsWith('apiserver_request_total{');
    if (!total && !line.startsWith('apiserver_request_duration_seconds_sum{')) continue;
    const labels = Object.fromEntries(
      [...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!] as const),
    );
    const key = `${labels.verb} ${labels.resource}${labels.subresource ? `/${labels.subresource}` : ''}`;
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    const o = (out[key] ??= { n: 0, s: 0 });
    if (total) o.n += v;
    else if (labels.verb !== 'WATCH') o.s += v;
  }
  return out;
}

/**
 * Requests between two apiserverRequests() readings: the total, and per `verb resource` with at
 * least `min` requests, `[count, seconds the API server spent on them]`.
 */
export function requestsBetween(
  a: Record<string, { n: number; s: number }>,
  b: Record<string, { n: number; s: number }>,
  min = 20,
) {
  const d = Object.entries(b).map(
    ([k, v]) => [k, v.n - (a[k]?.n ?? 0), +(v.s - (a[k]?.s ?? 0)).toFixed(1)] as const,
  );
  return {
    total: d.reduce((s, [, n]) => s + n, 0),
    serverSeconds: +d.reduce((s, [, , t]) => s + t, 0).toFixed(1),
    byVerbResource: Object.fromEntries(
      d
        .filter(([, n]) => n >= min)
        .sort(([, x], [, y]) => y - x)
        .map(([k, n, t]) => [k, [n, t]]),
    ),
  };
}

/**
 * A CPU profile of this process (the operator and the bench) between start() and stop(), written
 * as a .cpuprofile (Chrome DevTools, speedscope) — the phase of interest only, unlike --cpu-prof.
 */
export async function startCpuProfile(file: string): Promise<() => Promise<void>> {
  const session = new inspector.Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 1000 });
  await session.post('Profiler.start');
  return async () => {
    const { profile } = await session.post('Profiler.stop');
    writeFileSync(file, JSON.stringify(profile));
    session.disconnect();
  };
}

/**
 * Watches one phase of a bench (the baseline's Deployments to ready, Berth's endpoints to `up`):
 * CPU seconds per process, the API server's requests by verb and resource, this process's event-loop
 * utilisation (1.0: the operator's thread never idle), and every 5 s a timeline point
 * `[seconds, done so far, machine busy fraction over those 5 s]`.
 */
export async function monitorPhase() {
  const cpu0 = cpuSnapshot();
  const req0 = await apiserverRequests();
  const elu0 = performance.eventLoopUtilization();
  let done: () => number = () => 0;
  const timeline: [number, number, number][] = [];
  let last = cpu0;
  const timer = setInterval(() => {
    const now = cpuSnapshot();
    const busy = (now.machineBusy - last.machineBusy) / (now.machineTotal - last.machineTotal || 1);
    timeline.push([Math.round((now.at - cpu0.at) / 1000), done(), +busy.toFixed(2)]);
    last = now;
  }, 5000);
  return {
    progress: (fn: () => number) => (done = fn),
    async end() {
      clearInterval(timer);
      const cpu = cpuBetween(cpu0, cpuSnapshot());
      const elu = performance.eventLoopUtilization(elu0);
      return {
        ...cpu,
        eventLoopUtilization: +elu.utilization.toFixed(2),
        apiserverRequests: requestsBetween(req0, await apiserverRequests()),
        timeline,
      };
    },
  };
}

/**
 * BERTH_BENCH_APISERVER_PROFILE=prefix: a CPU profile of kube-apiserver (its /debug/pprof, through
 * kubectl) for the first BERTH_BENCH_APISERVER_PROFILE_SECONDS (default 30; or a list, one per phase) of a phase, written to
 * `prefix-<phase>.pprof`; read it with `go tool pprof -top`. Resolves when the profile is written.
 */
let profiled = 0;
export function apiserverProfile(phase: string): Promise<void> {
  const prefix = process.env.BERTH_BENCH_APISERVER_PROFILE;
  if (!prefix) return Promise.resolve();
  // One duration for every phase, or one per phase in order ("40,70": the baseline's, then Berth's).
  const durations = (process.env.BERTH_BENCH_APISERVER_PROFILE_SECONDS ?? '30').split(',').map(Number);
  const seconds = durations[Math.min(profiled++, durations.length - 1)]!;
  const child = spawn(kubectlPath(), ['get', '--raw', `/debug/pprof/profile?seconds=${seconds}`], {
    env: { ...process.env, KUBECONFIG: kubeconfigPath() },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  child.stdout.pipe(createWriteStream(`${prefix}-${phase}.pprof`));
  return new Promise((resolve) => child.on('close', () => resolve()));
}

/**
 * Waits until no namespace is terminating (an earlier run's clean-up, or a test's), so that its
 * teardown does not run through the phases measured here. Resolves with the seconds waited.
 */
export async function untilNoNamespaceTerminates(timeoutMs = 20 * 60_000): Promise<number> {
  const t0 = Date.now();
  while (Date.now() - t0 < timeoutMs) {
    const list = JSON.parse(await kubectlOk(['get', 'namespaces', '-o', 'json'])) as {
      items: { status?: { phase?: string } }[];
    };
    if (!list.items.some((n) => n.status?.phase === 'Terminating')) break;
    await sleep(2000);
  }
  return +((Date.now() - t0) / 1000).toFixed(1);
}
