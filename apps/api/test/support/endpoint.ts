// A DedicatedEndpoint object as the API's cache holds one, for tests of the code that reads it.
import { API_VERSION, KIND, type DedicatedEndpoint } from '@berth/crds';

export function endpointObject(
  id: string,
  status: DedicatedEndpoint['status'],
  o: { annotations?: Record<string, string>; spec?: Partial<DedicatedEndpoint['spec']> } = {},
): DedicatedEndpoint {
  return {
    apiVersion: API_VERSION,
    kind: KIND,
    metadata: { name: id, namespace: 'default', annotations: { ...o.annotations } },
    spec: {
      account: 'a',
      model: { id: 'org/m', revision: 'main' },
      hardware: { gpuType: 'g', gpuCount: 1 },
      authMode: 'Private',
      scaling: { minReplicas: 0, maxReplicas: 2, idleTimeoutSeconds: 900 },
      ...o.spec,
    },
    status,
  };
}
