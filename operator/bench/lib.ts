// Shared parts of the operator benchmarks (endpoints.ts, hibernated.ts).
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import type { DedicatedEndpointSpecInput } from '@berth/crds';
import { ANNOTATION_DISPLAY_NAME, API_VERSION, FINALIZER, GROUP, KIND, PLURAL, VERSION } from '@berth/crds';
import type { OperatorHandle } from '@berth/operator';
import type { KubeConfig, KubernetesListObject, KubernetesObject } from '@kubernetes/client-node';
import { makeInformer } from '@kubernetes/client-node';
import type { Cluster } from '@berth/test/support/operator';

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

/** Resident memory (MiB) of the local control plane's processes, by command name. */
export function controlPlaneRss(): Record<string, number> {
  let out = '';
  try {
    out = execFileSync(
      'ps',
      ['-C', 'etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kwok', '-o', 'comm=,rss='],
      {
        encoding: 'utf8',
      },
    );
  } catch {
    return {};
  }
  const rss: Record<string, number> = {};
  for (const line of out.trim().split('\n')) {
    const [comm, kb] = line.trim().split(/\s+/);
    if (comm && kb) rss[comm] = (rss[comm] ?? 0) + Math.round(Number(kb) / 1024);
  }
  return rss;
}

/** etcd's database size (MiB), read from its metrics (the 2 GiB quota must not be reached). */
export async function etcdDbMiB(): Promise<number | undefined> {
  try {
    const args = execFileSync('ps', ['-C', 'etcd', '-o', 'args='], { encoding: 'utf8' });
    const url = /--listen-client-urls=(\S+)/.exec(args)?.[1]?.split(',')[0];
    if (!url) return undefined;
    const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
    const v = /^etcd_mvcc_db_total_size_in_bytes (\S+)$/m.exec(text)?.[1];
    return v ? Math.round(Number(v) / 2 ** 20) : undefined;
  } catch {
    return undefined;
  }
}

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
 * many did, at the deadline at the latest.
 */
export async function watchUntil<T extends KubernetesObject>(
  kc: KubeConfig,
  path: string,
  list: () => Promise<KubernetesListObject<T>>,
  done: (o: T) => boolean,
  n: number,
  timeoutMs: number,
): Promise<number> {
  const informer = makeInformer<T>(kc, path, list);
  const ok = new Set<string>();
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
