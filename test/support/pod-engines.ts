// Serves the engine pods of a kwok cluster with real engine simulators. kwok gives pods loopback
// addresses (127.16.0.0/16) and marks them Running, but runs nothing; this watches the pods of a
// namespace and, for each running engine pod, starts an engine simulator bound to the pod's IP,
// with the pod's own `vllm serve` arguments and environment. When the pod goes, so does its server.
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

export async function servePodEngines(
  kc: KubeConfig,
  namespace: string,
  defaults: Partial<EngineSimOptions> = { ttftMs: 5, itlMs: 2, outputTokens: 16 },
): Promise<PodEngines> {
  const core = kc.makeApiClient(CoreV1Api);
  const informer = makeInformer<V1Pod & KubernetesObject>(
    kc,
    `/api/v1/namespaces/${namespace}/pods`,
    () => core.listNamespacedPod({ namespace, labelSelector: LABEL_ENDPOINT }),
    LABEL_ENDPOINT,
  );
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
    const p = startEngineSim({ ...merged, host: ip, port: options.port, waitReady: false })
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
