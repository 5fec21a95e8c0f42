// An in-memory endpoint runtime for benchmarks and proxy tests: one DedicatedEndpoint object and a
// Backends whose addresses the caller sets — the API's ports, with no Kubernetes behind them. The
// API's own platform upstream (wake, hold, activity, replica choice) is built on top as in server.ts.
import { API_VERSION, KIND, type DedicatedEndpoint, type Phase, type RoutingStrategy } from '@berth/crds';
import { Listeners } from '@berth/operator';
import type { Backends, EndpointRuntime, Endpoints } from '@berth/api';

export const BENCH_ENDPOINT_ID = 'endpt-bench0001';

export interface MemoryRuntime extends EndpointRuntime {
  /** Replaces the endpoint (its owner, phase and, optionally, routing strategy). */
  setEndpoint(account: string, phase: Phase, routing?: RoutingStrategy): void;
  /** Sets the ready replica addresses and notifies watchers (the "readiness" moment). */
  setAddresses(addresses: readonly string[]): void;
  /** Wake annotations written (the store's annotate calls carrying a wake request). */
  readonly annotations: number;
}

export function memoryRuntime(): MemoryRuntime {
  let endpoint: DedicatedEndpoint | undefined;
  let addresses: readonly string[] = [];
  let annotations = 0;
  const endpointListeners = new Listeners<DedicatedEndpoint | undefined>();
  const addressListeners = new Listeners<readonly string[]>();

  const store: Endpoints = {
    ready: async () => {},
    get: (id) => (endpoint && endpoint.metadata.name === id ? endpoint : undefined),
    list: () => (endpoint ? [endpoint] : []),
    listFresh: () => Promise.resolve(endpoint ? [endpoint] : []),
    create: () => Promise.reject(new Error('the benchmark runtime does not create endpoints')),
    update: () => Promise.reject(new Error('the benchmark runtime does not update endpoints')),
    delete: async () => false,
    async annotate(id, values) {
      annotations++;
      if (!endpoint || endpoint.metadata.name !== id) return;
      endpoint = {
        ...endpoint,
        metadata: { ...endpoint.metadata, annotations: { ...endpoint.metadata.annotations, ...values } },
      };
      endpointListeners.emit(id, endpoint);
    },
    watch: (id, fn) => endpointListeners.add(id, fn),
    close: async () => {},
  };
  const backends: Backends = {
    ready: async () => {},
    addresses: (id) => (id === BENCH_ENDPOINT_ID ? addresses : []),
    watch: (id, fn) => addressListeners.add(id, fn),
    close: async () => {},
  };
  const noLogs = { stream: async () => {} };

  return {
    kind: 'kubernetes',
    endpoints: store,
    backends,
    logs: noLogs,
    ready: async () => {},
    close: async () => {},
    get annotations() {
      return annotations;
    },
    setEndpoint(account, phase, routing) {
      const now = new Date().toISOString();
      endpoint = {
        apiVersion: API_VERSION,
        kind: KIND,
        metadata: { name: BENCH_ENDPOINT_ID, namespace: 'default', annotations: {} },
        spec: {
          account,
          model: { id: 'berth/bench', revision: 'main' },
          hardware: { gpuType: 'bench', gpuCount: 1 },
          authMode: 'Private',
          scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 900 },
          ...(routing ? { routing: { strategy: routing } } : {}),
        },
        status: { phase, ...(phase === 'hibernated' ? { hibernatedAt: now } : { upSince: now }) },
      };
      endpointListeners.emit(BENCH_ENDPOINT_ID, endpoint);
    },
    setAddresses(next) {
      addresses = next;
      if (endpoint && next.length && endpoint.status?.phase !== 'up') {
        endpoint = { ...endpoint, status: { ...endpoint.status, phase: 'up' } };
        endpointListeners.emit(BENCH_ENDPOINT_ID, endpoint);
      }
      addressListeners.emit(BENCH_ENDPOINT_ID, addresses);
    },
  };
}
