import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { PoolDefaults } from '../config.ts';
import type { BuildConfig } from './builders.ts';
import { KubeCache, type WatchEventOutcome } from './cache.ts';
import { KubeWorkloadDriver, type WrittenResource } from './driver.ts';
import { KubeEndpointStore } from './store.ts';

// The Kubernetes runtime of the reconciler: its three jobs, composed. The cache watches, the store
// writes the endpoint's status, finalizer and events, the driver applies and observes the workload.

export interface KubeRuntimeOptions {
  kc: KubeConfig;
  namespace: string; // '' = all namespaces
  build: BuildConfig;
  crashLoopRestarts: number;
  identity: string;
  log: Logger;
  onInformerError: () => void;
  /** Every write to the API server, by resource. */
  onWrite?: (resource: WrittenResource) => void;
  /** Called with the endpoint key whenever the endpoint or one of its children changes. */
  enqueue: (key: string, urgent?: boolean) => void;
  onWatchEvent?: (outcome: WatchEventOutcome) => void;
  /** InferencePools: the default for endpoints that do not say, and the default picker. */
  pools?: PoolDefaults;
  /** While the InferencePool CRD is absent, how often to ask whether it was installed. */
  poolRecheckMs?: number;
}

export interface KubeRuntime {
  cache: KubeCache;
  store: KubeEndpointStore;
  driver: KubeWorkloadDriver;
}

export function kubeRuntime(o: KubeRuntimeOptions): KubeRuntime {
  const cache = new KubeCache(o);
  return {
    cache,
    store: new KubeEndpointStore(cache, o.kc, {
      identity: o.identity,
      log: o.log,
      ...(o.onWrite ? { onWrite: o.onWrite } : {}),
    }),
    driver: new KubeWorkloadDriver(cache, o.kc, {
      build: o.build,
      crashLoopRestarts: o.crashLoopRestarts,
      log: o.log,
      ...(o.onWrite ? { onWrite: o.onWrite } : {}),
      ...(o.pools ? { pools: o.pools } : {}),
    }),
  };
}
