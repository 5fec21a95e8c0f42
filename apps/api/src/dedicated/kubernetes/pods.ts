// Where each endpoint's replicas can be reached on Kubernetes, from a watch on its engine pods.
import {
  CoreV1Api,
  makeInformer,
  type KubeConfig,
  type KubernetesObject,
  type V1Pod,
} from '@kubernetes/client-node';
import { ENGINE_PORT, LABEL_ENDPOINT } from '@berth/crds';
import { Listeners, supervise } from '@berth/operator';
import type { Logger } from 'pino';
import type { Backends } from '../ports.ts';

/**
 * Ready addresses of each endpoint's engine pods (labelled `berth.dev/endpoint`), learned from a
 * watch as KubeAI does: a held request hears of a Ready replica from the watch event, not by
 * polling. Pods rather than EndpointSlices: slices refuse loopback addresses, which the local
 * control plane's pods have, and a pod watch needs no Service routing.
 */
export function k8sBackends(kc: KubeConfig, namespace: string, logger: Logger): Backends {
  const core = kc.makeApiClient(CoreV1Api);
  const informer = makeInformer<V1Pod & KubernetesObject>(
    kc,
    `/api/v1/namespaces/${namespace}/pods`,
    () => core.listNamespacedPod({ namespace, labelSelector: LABEL_ENDPOINT }),
    LABEL_ENDPOINT,
  );
  const listeners = new Listeners<readonly string[]>();
  const byEndpoint = new Map<string, readonly string[]>();

  const recompute = (id: string) => {
    const addresses: string[] = [];
    for (const pod of informer.list(namespace)) {
      if (pod.metadata?.labels?.[LABEL_ENDPOINT] !== id) continue;
      const ip = pod.status?.podIP;
      // Ready and not terminating: a draining replica gets no new requests.
      const ready = pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
      if (!ip || !ready || pod.metadata?.deletionTimestamp) continue;
      addresses.push(`http://${ip.includes(':') ? `[${ip}]` : ip}:${ENGINE_PORT}`);
    }
    addresses.sort();
    const before = byEndpoint.get(id) ?? [];
    if (before.length === addresses.length && before.every((a, i) => a === addresses[i])) return;
    if (addresses.length) byEndpoint.set(id, addresses);
    else byEndpoint.delete(id);
    listeners.emit(id, addresses);
  };
  const onPod = (p: V1Pod) => {
    const id = p.metadata?.labels?.[LABEL_ENDPOINT];
    if (id) recompute(id);
  };
  informer.on('add', onPod);
  informer.on('update', onPod);
  informer.on('delete', onPod);
  const supervised = supervise('pods', informer, logger, () => {});
  const started = supervised.start();

  return {
    ready: () => started,
    addresses: (id) => byEndpoint.get(id) ?? [],
    watch: (id, fn) => listeners.add(id, fn),
    close: () => supervised.stop(),
  };
}
