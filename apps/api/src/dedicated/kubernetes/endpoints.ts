// The API's endpoint cache and writes on Kubernetes: an informer on the DedicatedEndpoints of one
// namespace, and create (with the hub-token Secret), delete and annotation patches.
import {
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  PatchStrategy,
  makeInformer,
  setHeaderOptions,
  type KubernetesObject,
} from '@kubernetes/client-node';
import {
  ANNOTATION_DISPLAY_NAME,
  API_VERSION,
  FINALIZER,
  GROUP,
  KIND,
  LABEL_ENDPOINT,
  PLURAL,
  VERSION,
  type DedicatedEndpoint,
} from '@berth/crds';
import { KubeRequests, Listeners, supervise } from '@berth/operator';
import type { Logger } from 'pino';
import { endpointChanged, endpointNotFound } from '../../platform/errors.ts';
import type { Endpoints } from '../ports.ts';
import { BILLING_FINALIZER } from './gpu-meter.ts';
import type { OperatorWake } from './operator-wake.ts';

function isNotFound(err: unknown): boolean {
  return (err as { code?: number }).code === 404;
}

/** 409 from the API server: AlreadyExists on create, a stale resourceVersion on replace. */
function isConflict(err: unknown): boolean {
  return (err as { code?: number }).code === 409;
}

export function k8sEndpoints(
  kc: KubeConfig,
  namespace: string,
  logger: Logger,
  signalWake?: OperatorWake,
): Endpoints {
  const api = kc.makeApiClient(CustomObjectsApi);
  const core = kc.makeApiClient(CoreV1Api);
  const requests = new KubeRequests(kc);
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
    async listFresh() {
      const list = (await api.listNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: PLURAL,
      })) as { items: DedicatedEndpoint[] };
      return list.items;
    },
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
        metadata: {
          name: id,
          namespace,
          annotations: { [ANNOTATION_DISPLAY_NAME]: displayName },
          // Held until the endpoint's billing record is closed (gpu-meter.ts), and until the operator
          // has terminated it: present from the start, the operator's pass need not add its own.
          finalizers: [BILLING_FINALIZER, FINALIZER],
        },
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
        if (isConflict(err)) throw endpointChanged(id);
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
    async update(id, { displayName, spec, generation }) {
      // Read-then-replace with the object's resourceVersion: a write between the two is a 409 from
      // the API server, never a lost update.
      let current: DedicatedEndpoint;
      try {
        current = (await api.getNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace,
          plural: PLURAL,
          name: id,
        })) as DedicatedEndpoint;
      } catch (err) {
        if (isNotFound(err)) throw endpointNotFound(id);
        throw err;
      }
      if (
        current.metadata.deletionTimestamp ||
        (generation !== undefined && current.metadata.generation !== generation)
      )
        throw endpointChanged(id);
      try {
        return (await api.replaceNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace,
          plural: PLURAL,
          name: id,
          body: {
            ...current,
            metadata: {
              ...current.metadata,
              annotations: { ...current.metadata.annotations, [ANNOTATION_DISPLAY_NAME]: displayName },
            },
            spec,
          },
        })) as DedicatedEndpoint;
      } catch (err) {
        if (isConflict(err)) throw endpointChanged(id);
        if (isNotFound(err)) throw endpointNotFound(id);
        throw err;
      }
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
      // The wake signal and the activity reports: one merge patch straight over the shared
      // connection (the operator's request path), not through the typed client, whose serializer
      // walks the whole answer (the endpoint with its status) on a call's path.
      await requests.send(
        'PATCH',
        `${path}/${encodeURIComponent(id)}`,
        { metadata: { annotations } },
        'application/merge-patch+json',
      );
    },
    ...(signalWake ? { signalWake } : {}),
    watch: (id, fn) => listeners.add(id, fn),
    close: () => supervised.stop(),
  };
}
