// Dedicated GPU time on Kubernetes, as the leading API replica meters it (see billing/leadership.ts).
// It watches the engine pods and the DedicatedEndpoints of the namespace and, for one endpoint at a
// time, replays what its pods show (scheduled → gone) into the endpoint's meter (billing/gpu-spans.ts):
// on every pod or endpoint change and, for every endpoint, every `syncIntervalMs` (a heartbeat that
// bounds what an unseen end can cost, and the catch-up after a restart or a hand-over).
//
// Termination cannot lose the last interval: the API puts its own finalizer, `berth.dev/billing`,
// on every endpoint (at create; the meter adds it to endpoints made with kubectl), and removes it
// only after the meter is closed at the endpoint's deletion time. If no API runs when an endpoint is
// deleted, the endpoint waits, Terminating, until one does. The operator's finalizer is its own.
import {
  CoreV1Api,
  CustomObjectsApi,
  makeInformer,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
  type KubernetesObject,
  type V1Pod,
} from '@kubernetes/client-node';
import { GROUP, LABEL_ENDPOINT, PLURAL, VERSION, type DedicatedEndpoint } from '@berth/crds';
import { supervise } from '@berth/operator';
import type { Logger } from 'pino';
import { replay, type ReplicaSpan } from '../../billing/gpu-spans.ts';
import type { GpuBilling } from '../../billing/metering.ts';

/** The API's finalizer on every DedicatedEndpoint: removed once its billing record is closed. */
export const BILLING_FINALIZER = 'berth.dev/billing';

/**
 * A watch event arrives within moments of the change; one later than this was missed (a relist, a
 * restart), and the cluster's own timestamp is the better time. Otherwise the meter keeps to its
 * own clock, as every other time in the meter (cluster timestamps have second precision and come
 * from another machine's clock).
 */
export const LIVE_EVENT_MS = 5_000;

/** What the meter saw of a pod itself (its clock): when it was first scheduled, when it ended. */
export interface PodMemory {
  seenAt?: Date;
  endedAt?: Date;
}

const TERMINAL = new Set(['Succeeded', 'Failed']);

/** A time from the cluster, or the meter's moment of seeing it when that came promptly after it. */
export function clusterTime(stamp: Date | undefined, seenAt: Date | undefined): Date | undefined {
  if (!stamp) return seenAt;
  return seenAt && seenAt >= stamp && seenAt.getTime() - stamp.getTime() <= LIVE_EVENT_MS ? seenAt : stamp;
}

/**
 * A pod's span on the meter's clock (`toClock` converts the cluster's times), or nothing if it never
 * held GPUs: from its scheduling until it is gone — deleted, or its containers finished.
 */
export function podSpan(pod: V1Pod, mem: PodMemory, toClock: (d: Date) => Date): ReplicaSpan | undefined {
  if (!pod.spec?.nodeName) return undefined;
  const scheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'True');
  const stamp = scheduled?.lastTransitionTime ?? pod.metadata?.creationTimestamp;
  const start = clusterTime(stamp ? toClock(new Date(stamp)) : undefined, mem.seenAt);
  if (!start) return undefined;
  let end = mem.endedAt;
  if (TERMINAL.has(pod.status?.phase ?? '')) {
    const finished = (pod.status?.containerStatuses ?? [])
      .map((s) => s.state?.terminated?.finishedAt)
      .filter((d): d is Date => !!d)
      .map((d) => new Date(d).getTime());
    end = clusterTime(finished.length ? toClock(new Date(Math.max(...finished))) : undefined, mem.endedAt);
  }
  if (end && end < start) end = start;
  return end ? { start, end } : { start };
}

export interface K8sGpuMeterOptions {
  kc: KubeConfig;
  namespace: string;
  gpu: GpuBilling;
  logger: Logger;
  now: () => Date;
  syncIntervalMs: number;
  onSync?: (outcome: 'ok' | 'error') => void;
}

/** Starts metering (on the leader); resolves once the caches are filled, to the function that stops it. */
export async function startK8sGpuMeter(o: K8sGpuMeterOptions): Promise<() => Promise<void>> {
  const log = o.logger.child({ component: 'gpu-meter' });
  const custom = o.kc.makeApiClient(CustomObjectsApi);
  const core = o.kc.makeApiClient(CoreV1Api);
  const ns = o.namespace;
  const coords = { group: GROUP, version: VERSION, namespace: ns, plural: PLURAL };
  // The cluster's clock is real; a test clock shifted or frozen shifts the cluster's times with it.
  const toClock = (d: Date) => new Date(d.getTime() + (o.now().getTime() - Date.now()));

  const pods = makeInformer<V1Pod & KubernetesObject>(
    o.kc,
    `/api/v1/namespaces/${ns}/pods`,
    () => core.listNamespacedPod({ namespace: ns, labelSelector: LABEL_ENDPOINT }),
    LABEL_ENDPOINT,
  );
  const endpoints = makeInformer<DedicatedEndpoint & KubernetesObject>(
    o.kc,
    `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${PLURAL}`,
    () => custom.listNamespacedCustomObject(coords),
  );

  /**
   * By pod uid. A span's times are fixed when first known (a moving test clock would otherwise move
   * them). Deleted pods stay here until a sync has written their end.
   */
  const memory = new Map<string, PodMemory & { endpointId: string; gone: boolean; span?: ReplicaSpan }>();
  /** Endpoints seen deleted (no finalizer of ours held them): when. */
  const deletedAt = new Map<string, Date>();
  const deletingSeenAt = new Map<string, Date>();

  const remember = (pod: V1Pod, gone: boolean) => {
    const uid = pod.metadata?.uid;
    const endpointId = pod.metadata?.labels?.[LABEL_ENDPOINT];
    if (!uid || !endpointId) return;
    const now = o.now();
    const m = memory.get(uid) ?? { endpointId, gone: false };
    if (pod.spec?.nodeName) m.seenAt ??= now;
    if ((gone || TERMINAL.has(pod.status?.phase ?? '')) && !m.endedAt) m.endedAt = now;
    m.gone ||= gone;
    const span = podSpan(pod, m, toClock);
    if (span) {
      m.span ??= { start: span.start };
      if (span.end) m.span.end ??= span.end;
    }
    memory.set(uid, m);
    schedule(endpointId);
  };
  pods.on('add', (p) => remember(p, false));
  pods.on('update', (p) => remember(p, false));
  pods.on('delete', (p) => remember(p, true));
  const onEndpoint = (e: DedicatedEndpoint) => {
    // Only a live event tells when the deletion happened on our clock: an endpoint that was already
    // Terminating when this replica started (the first list) keeps the cluster's timestamp.
    if (ready && e.metadata.deletionTimestamp && !deletingSeenAt.has(e.metadata.name))
      deletingSeenAt.set(e.metadata.name, o.now());
    schedule(e.metadata.name);
  };
  endpoints.on('add', onEndpoint);
  endpoints.on('update', onEndpoint);
  endpoints.on('delete', (e) => {
    if (!deletedAt.has(e.metadata.name)) deletedAt.set(e.metadata.name, o.now());
    schedule(e.metadata.name);
  });

  const setFinalizer = async (ep: DedicatedEndpoint, present: boolean) => {
    const others = (ep.metadata.finalizers ?? []).filter((f) => f !== BILLING_FINALIZER);
    // resourceVersion makes the merge patch conditional: a concurrent change of the list is a 409,
    // and the next sync works from the newer object.
    await custom.patchNamespacedCustomObject(
      {
        ...coords,
        name: ep.metadata.name,
        body: {
          metadata: {
            resourceVersion: ep.metadata.resourceVersion,
            finalizers: present ? [...others, BILLING_FINALIZER] : others,
          },
        },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
  };

  const sync = async (id: string) => {
    const ep = endpoints.get(id, ns);
    const now = o.now();
    if (!ep) {
      const meter = await o.gpu.meter(id);
      if (meter && !meter.terminatedAt) {
        // Deleted without our finalizer: when we saw it go, or, after a restart, the last observation.
        await o.gpu.terminate(id, deletedAt.get(id) ?? meter.lastObservedAt);
        log.info({ endpoint: id }, 'endpoint gone: its GPU meter is closed');
      }
      deletedAt.delete(id);
      for (const [uid, m] of memory) if (m.endpointId === id && m.gone) memory.delete(uid);
      return;
    }
    const stamp = ep.metadata.deletionTimestamp;
    const finalizers = ep.metadata.finalizers ?? [];
    if (stamp) {
      const at = clusterTime(toClock(new Date(stamp)), deletingSeenAt.get(id)) ?? now;
      // What ran up to the deletion is replayed first, then the meter is closed at it.
      await observe(ep, at);
      await o.gpu.terminate(id, at);
      if (finalizers.includes(BILLING_FINALIZER)) await setFinalizer(ep, false);
      log.info({ endpoint: id, at: at.toISOString() }, 'endpoint terminated: its GPU meter is closed');
      return;
    }
    if (!finalizers.includes(BILLING_FINALIZER)) await setFinalizer(ep, true);
    await observe(ep, now);
    for (const [uid, m] of memory) if (m.endpointId === id && m.gone && m.endedAt! <= now) memory.delete(uid);
  };

  const observe = async (ep: DedicatedEndpoint, until: Date) => {
    const id = ep.metadata.name;
    const spans: ReplicaSpan[] = [];
    for (const m of memory.values()) if (m.endpointId === id && m.span) spans.push(m.span);
    const meter = await o.gpu.meter(id);
    if (meter?.terminatedAt) return;
    for (const step of replay(meter, spans, until)) {
      await o.gpu.observe({
        endpointId: id,
        accountId: ep.spec.account,
        instanceType: ep.spec.hardware.gpuType,
        gpusPerReplica: ep.spec.hardware.gpuCount,
        replicas: step.replicas,
        at: step.at,
      });
    }
  };

  // One sync per endpoint at a time; a change during one runs it again after.
  const state = new Map<string, { again: boolean }>();
  let stopped = false;
  let ready = false;
  const schedule = (id: string) => {
    if (stopped || !ready) return;
    const s = state.get(id);
    if (s) {
      s.again = true;
      return;
    }
    const entry = { again: true };
    state.set(id, entry);
    void (async () => {
      while (entry.again && !stopped) {
        entry.again = false;
        try {
          await sync(id);
          o.onSync?.('ok');
        } catch (err) {
          o.onSync?.('error');
          const code = (err as { code?: number }).code;
          if (code !== 409)
            log.warn({ err, endpoint: id }, 'GPU meter sync failed; retried on the next pass');
        }
      }
      state.delete(id);
      if (!state.size) idle?.();
    })();
  };
  let idle: (() => void) | undefined;

  const everything = async () => {
    const ids = new Set<string>(endpoints.list(ns).map((e) => e.metadata.name));
    for (const m of memory.values()) ids.add(m.endpointId);
    for (const id of await o.gpu.unterminated()) ids.add(id);
    for (const id of ids) schedule(id);
  };

  const pw = supervise('gpu-meter-pods', pods, log, () => {});
  const ew = supervise('gpu-meter-endpoints', endpoints, log, () => {});
  await Promise.all([pw.start(), ew.start()]);
  for (const p of pods.list(ns)) remember(p, false);
  ready = true;
  await everything();
  const timer = setInterval(() => {
    everything().catch((err: unknown) => log.warn({ err }, 'GPU meter resync failed'));
  }, o.syncIntervalMs);

  return async () => {
    clearInterval(timer);
    stopped = true;
    if (state.size) await new Promise<void>((r) => (idle = r));
    await Promise.all([pw.stop(), ew.stop()]);
  };
}
