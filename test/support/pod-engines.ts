// Serves the engine pods of a kwok cluster with real engine simulators. kwok gives pods loopback
// addresses (127.16.0.0/16) and marks them Running, but runs nothing; this watches the pods of a
// namespace and, for each running engine pod, starts an engine simulator bound to the pod's IP,
// with the pod's own `vllm serve` arguments and environment. When the pod goes, so does its server.
// With `nodeDisks`, each node has a disk (a directory under it): a pod's hostPath volumes are that
// node's directories, and its simulator starts with the pod's environment resolved onto them — so
// the weights and compile caches a pod leaves on its node's cache volume are there for the next pod
// on that node, and only for it, as on a cluster.
import path from 'node:path';
import {
  CoreV1Api,
  makeInformer,
  type KubeConfig,
  type KubernetesObject,
  type V1Pod,
} from '@kubernetes/client-node';
import { LABEL_ENDPOINT } from '@berth/crds';
import { parseArgs, startEngineSim, type EngineSimHandle, type EngineSimOptions } from '@berth/engine-sim';

export interface PodEngines {
  /** Pod name → its simulator, for the pods being served now. */
  readonly servers: ReadonlyMap<string, EngineSimHandle>;
  /** Simulators started so far (a wake starts a new one). */
  readonly started: number;
  /** Start-up failures (e.g. the pod's address already in use), by pod name. */
  readonly errors: ReadonlyMap<string, Error>;
  /** The simulators serving one endpoint's pods. */
  forEndpoint(id: string): EngineSimHandle[];
  close(): Promise<void>;
}

/** An informer on the namespace's engine pods (labelled with their endpoint), not yet started. */
export function enginePodInformer(kc: KubeConfig, namespace: string) {
  const core = kc.makeApiClient(CoreV1Api);
  return makeInformer<V1Pod & KubernetesObject>(
    kc,
    `/api/v1/namespaces/${namespace}/pods`,
    () => core.listNamespacedPod({ namespace, labelSelector: LABEL_ENDPOINT }),
    LABEL_ENDPOINT,
  );
}

/**
 * The pod's engine environment as its process would see it on its node: each path under a hostPath
 * volume's mount becomes the same path on that node's disk (`<nodeDisks>/<node>/<hostPath>`).
 */
export function envOnNode(pod: V1Pod, nodeDisks: string): Record<string, string> {
  const container = pod.spec?.containers[0];
  const node = pod.spec?.nodeName ?? 'unscheduled';
  const mounts = (container?.volumeMounts ?? []).flatMap((m) => {
    const host = pod.spec?.volumes?.find((v) => v.name === m.name)?.hostPath?.path;
    return host ? [{ at: m.mountPath, to: path.join(nodeDisks, node, host) }] : [];
  });
  const env: Record<string, string> = {};
  for (const e of container?.env ?? []) {
    const value = e.value ?? '';
    const m = mounts.find((x) => value === x.at || value.startsWith(`${x.at}/`));
    env[e.name] = m ? m.to + value.slice(m.at.length) : value;
  }
  return env;
}

export async function servePodEngines(
  kc: KubeConfig,
  namespace: string,
  defaults: Partial<EngineSimOptions> = { ttftMs: 5, itlMs: 2, outputTokens: 16 },
  opts: { nodeDisks?: string } = {},
): Promise<PodEngines> {
  const informer = enginePodInformer(kc, namespace);
  const servers = new Map<string, EngineSimHandle>();
  const endpointOf = new Map<string, string>();
  const errors = new Map<string, Error>();
  const starting = new Map<string, Promise<void>>();
  let started = 0;
  let closed = false;

  const stop = async (name: string) => {
    await starting.get(name);
    const s = servers.get(name);
    servers.delete(name);
    await s?.close(200);
  };

  const sync = (pod: V1Pod) => {
    const name = pod.metadata?.name;
    if (!name || closed) return;
    const ip = pod.status?.podIP;
    const live = !pod.metadata?.deletionTimestamp && pod.status?.phase === 'Running' && !!ip;
    if (!live) {
      if (servers.has(name) || starting.has(name)) void stop(name);
      return;
    }
    if (servers.has(name) || starting.has(name)) return;
    const container = pod.spec?.containers[0];
    const env = Object.fromEntries((container?.env ?? []).map((e) => [e.name, e.value ?? '']));
    const { options } = parseArgs(container?.args ?? [], env);
    const explicit = new Set(Object.keys(env));
    const merged: Partial<EngineSimOptions> = { ...options };
    // The harness's fast defaults apply unless the pod's environment set the knob itself.
    for (const [k, v] of Object.entries(defaults)) {
      const envName = `SIM_${k.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`;
      if (!explicit.has(envName)) (merged as Record<string, unknown>)[k] = v;
    }
    const p = startEngineSim({
      ...merged,
      host: ip,
      port: options.port,
      waitReady: false,
      ...(opts.nodeDisks ? { env: envOnNode(pod, opts.nodeDisks) } : {}),
    })
      .then((s) => {
        started++;
        servers.set(name, s);
        endpointOf.set(name, pod.metadata?.labels?.[LABEL_ENDPOINT] ?? '');
      })
      .catch((err: Error) => {
        errors.set(name, err);
        console.error(`pod-engines: could not serve pod ${name} on ${ip}: ${err.message}`);
      })
      .finally(() => starting.delete(name));
    starting.set(name, p);
  };

  informer.on('add', sync);
  informer.on('update', sync);
  informer.on('delete', (pod) => {
    if (pod.metadata?.name) void stop(pod.metadata.name);
  });
  await informer.start();
  return {
    servers,
    get started() {
      return started;
    },
    errors,
    forEndpoint: (id) => [...servers].filter(([pod]) => endpointOf.get(pod) === id).map(([, s]) => s),
    async close() {
      closed = true;
      await informer.stop();
      await Promise.all([...new Set([...servers.keys(), ...starting.keys()])].map(stop));
    },
  };
}
