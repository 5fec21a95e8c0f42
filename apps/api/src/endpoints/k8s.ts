// Kubernetes implementations of the endpoint store and backend resolver: informers on
// DedicatedEndpoints and on the EndpointSlices of their Services, in one namespace.
import {
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  makeInformer,
  setHeaderOptions,
  type KubernetesObject,
  type V1Pod,
} from '@kubernetes/client-node';
import {
  ANNOTATION_DISPLAY_NAME,
  API_VERSION,
  ENGINE_PORT,
  GROUP,
  KIND,
  LABEL_ENDPOINT,
  PLURAL,
  VERSION,
  type DedicatedEndpoint,
} from '@berth/crds';
import { Listeners, supervise } from '@berth/operator';
import type { Logger } from 'pino';
import type { Backends, EndpointStore } from './store.ts';

export function loadKubeConfig(kubeconfig?: string): KubeConfig {
  const kc = new KubeConfig();
  if (kubeconfig) kc.loadFromFile(kubeconfig);
  else kc.loadFromCluster();
  return kc;
}

function isNotFound(err: unknown): boolean {
  return (err as { code?: number }).code === 404;
}

export function k8sEndpointStore(kc: KubeConfig, namespace: string, logger: Logger): EndpointStore {
  const api = kc.makeApiClient(CustomObjectsApi);
  const core = kc.makeApiClient(CoreV1Api);
  const path = `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PLURAL}`;
  const informer = makeInformer<DedicatedEndpoint & KubernetesObject>(kc, path, () =>
    api.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: PLURAL }),
  );
  const listeners = new Listeners<DedicatedEndpoint | undefined>();
  informer.on('add', (e) => listeners.emit(e.metadata.name, e));
  informer.on('update', (e) => listeners.emit(e.metadata.name, e));
  informer.on('delete', (e) => listeners.emit(e.metadata.name, undefined));
  const supervised = supervise('dedicatedendpoints', informer, logger, () => {});
  const started = supervised.start();

  return {
    ready: () => started,
    get: (id) => informer.get(id, namespace),
    list: () => [...informer.list(namespace)],
    async create({ id, displayName, spec, hubToken }) {
      // The token goes into a Secret before the resource exists, so the operator's provisioning
      // check never sees a reference to a missing Secret; once the resource exists it owns the
      // Secret, so terminating the endpoint deletes the token too.
      const secretName = `${id}-hub-token`;
      if (hubToken) {
        await core.createNamespacedSecret({
          namespace,
          body: {
            metadata: { name: secretName, namespace, labels: { [LABEL_ENDPOINT]: id } },
            type: 'Opaque',
            stringData: { token: hubToken },
          },
        });
      }
      const body = {
        apiVersion: API_VERSION,
        kind: KIND,
        metadata: { name: id, namespace, annotations: { [ANNOTATION_DISPLAY_NAME]: displayName } },
        spec: hubToken
          ? { ...spec, model: { ...spec.model, hubTokenSecretRef: { name: secretName, key: 'token' } } }
          : spec,
      };
      let created: DedicatedEndpoint;
      try {
        created = (await api.createNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace,
          plural: PLURAL,
          body,
        })) as DedicatedEndpoint;
      } catch (err) {
        if (hubToken) await core.deleteNamespacedSecret({ name: secretName, namespace }).catch(() => {});
        throw err;
      }
      if (hubToken) {
        await core.patchNamespacedSecret(
          {
            name: secretName,
            namespace,
            body: {
              metadata: {
                ownerReferences: [
                  {
                    apiVersion: API_VERSION,
                    kind: KIND,
                    name: id,
                    uid: created.metadata.uid ?? '',
                    blockOwnerDeletion: false,
                  },
                ],
              },
            },
          },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        );
      }
      return created;
    },
    async delete(id) {
      try {
        await api.deleteNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace,
          plural: PLURAL,
          name: id,
        });
        return true;
      } catch (err) {
        if (isNotFound(err)) return false;
        throw err;
      }
    },
    async annotate(id, annotations) {
      await api.patchNamespacedCustomObject(
        {
          group: GROUP,
          version: VERSION,
          namespace,
          plural: PLURAL,
          name: id,
          body: { metadata: { annotations } },
        },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
    },
    watch: (id, fn) => listeners.add(id, fn),
    close: () => supervised.stop(),
  };
}

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
