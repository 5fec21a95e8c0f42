// Where dedicated endpoints run, as the API sees it: one runtime's adapters behind the ports.
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { GpuBilling } from '../billing/metering.ts';
import { kubernetesAdapters, loadKubeConfig } from './kubernetes/index.ts';
import { startK8sGpuMeter } from './kubernetes/gpu-meter.ts';
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

/** The GPU meter of the endpoints on Kubernetes, as leader work: what runs on one API replica. */
export function kubernetesGpuMeter(
  config: Config,
  deps: { gpu: GpuBilling; logger: Logger; now: () => Date; onSync?: (outcome: 'ok' | 'error') => void },
): () => Promise<() => Promise<void>> {
  return () =>
    startK8sGpuMeter({
      kc: loadKubeConfig(config.KUBECONFIG),
      namespace: config.BERTH_NAMESPACE,
      syncIntervalMs: config.BILLING_GPU_SYNC_INTERVAL_MS,
      ...deps,
    });
}

export { BILLING_FINALIZER } from './kubernetes/gpu-meter.ts';
export type { EndpointRuntime } from './ports.ts';
export { localRuntime, engineCommand } from './local/index.ts';
