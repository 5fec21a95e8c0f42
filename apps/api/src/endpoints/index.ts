// The dedicated-endpoint machinery the API runs beside its routes, wired for one runtime.
import { Agent } from 'undici';
import type { Catalog } from '@berth/crds';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import { activityReporter, type Activity } from './activity.ts';
import { kubernetesAdapters } from './kubernetes/index.ts';
import type { Backends, EndpointLogs, Endpoints } from './ports.ts';
import { waker, type Waker } from './wake.ts';

export interface EndpointRuntime {
  kind: 'kubernetes' | 'local';
  endpoints: Endpoints;
  backends: Backends;
  waker: Waker;
  activity: Activity;
  logs: EndpointLogs;
  dispatcher: Agent;
  ready(): Promise<void>;
  close(): Promise<void>;
}

export function kubernetesRuntime(config: Config, logger: Logger): EndpointRuntime {
  const { endpoints, backends, logs } = kubernetesAdapters(config.KUBECONFIG, config.BERTH_NAMESPACE, logger);
  const activity = activityReporter(endpoints, logger);
  const dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: null, pipelining: 1 });
  return {
    kind: 'kubernetes',
    endpoints,
    backends,
    waker: waker(endpoints, backends, logger),
    activity,
    logs,
    dispatcher,
    ready: () => Promise.all([endpoints.ready(), backends.ready()]).then(() => {}),
    async close() {
      await activity.close();
      await Promise.all([endpoints.close(), backends.close()]);
      await dispatcher.close();
    },
  };
}

export type { Catalog };
export { localRuntime, engineCommand } from './local/index.ts';
