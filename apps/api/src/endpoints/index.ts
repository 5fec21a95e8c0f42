// Where dedicated endpoints run, as the API sees it: one runtime's adapters behind the ports.
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import { kubernetesAdapters } from './kubernetes/index.ts';
import type { EndpointRuntime } from './ports.ts';

export function kubernetesRuntime(config: Config, logger: Logger): EndpointRuntime {
  const { endpoints, backends, logs } = kubernetesAdapters(config.KUBECONFIG, config.BERTH_NAMESPACE, logger);
  return {
    kind: 'kubernetes',
    endpoints,
    backends,
    logs,
    ready: () => Promise.all([endpoints.ready(), backends.ready()]).then(() => {}),
    close: () => Promise.all([endpoints.close(), backends.close()]).then(() => {}),
  };
}

export type { EndpointRuntime } from './ports.ts';
export { localRuntime, engineCommand } from './local/index.ts';
