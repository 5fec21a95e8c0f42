// The dedicated-endpoint machinery the API runs beside its routes, wired for one runtime.
import { Agent } from 'undici';
import type { Catalog } from '@berth/crds';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import { activityReporter, type Activity } from './activity.ts';
import { k8sBackends, k8sEndpointStore, loadKubeConfig } from './k8s.ts';
import { k8sEndpointLogs, type EndpointLogs } from './logs.ts';
import type { Backends, EndpointStore } from './store.ts';
import { waker, type Waker } from './wake.ts';

export interface EndpointRuntime {
  kind: 'kubernetes' | 'local';
  store: EndpointStore;
  backends: Backends;
  waker: Waker;
  activity: Activity;
  logs: EndpointLogs;
  dispatcher: Agent;
  ready(): Promise<void>;
  close(): Promise<void>;
}

export function kubernetesRuntime(config: Config, logger: Logger): EndpointRuntime {
  const kc = loadKubeConfig(config.KUBECONFIG);
  const ns = config.BERTH_NAMESPACE;
  const store = k8sEndpointStore(kc, ns, logger);
  const backends = k8sBackends(kc, ns, logger);
  const activity = activityReporter(store, logger);
  const dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: null, pipelining: 1 });
  return {
    kind: 'kubernetes',
    store,
    backends,
    waker: waker(store, backends, logger),
    activity,
    logs: k8sEndpointLogs(kc, ns),
    dispatcher,
    ready: () => Promise.all([store.ready(), backends.ready()]).then(() => {}),
    async close() {
      await activity.close();
      await Promise.all([store.close(), backends.close()]);
      await dispatcher.close();
    },
  };
}

export type { Catalog };
export { localRuntime, engineCommand } from './local/index.ts';
