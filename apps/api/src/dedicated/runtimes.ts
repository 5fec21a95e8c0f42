// Where dedicated endpoints run, as the API sees it: one runtime's adapters behind the ports.
import type { Logger } from 'pino';
import type { Config } from '../platform/config.ts';
import type { GpuBilling } from '../billing/metering.ts';
import { kubernetesAdapters, loadKubeConfig } from './kubernetes/index.ts';
import { startK8sGpuMeter } from './kubernetes/gpu-meter.ts';
import type { EndpointRuntime } from './ports.ts';

export function kubernetesRuntime(config: Config, logger: Logger): EndpointRuntime {
  const operator =
    config.BERTH_OPERATOR_URL && config.BERTH_WAKE_TOKEN
      ? { url: config.BERTH_OPERATOR_URL, token: config.BERTH_WAKE_TOKEN }
      : undefined;
  const { endpoints, backends, logs } = kubernetesAdapters(
    config.KUBECONFIG,
    config.BERTH_NAMESPACE,
    logger,
    operator,
  );
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

/**
 * Where dedicated endpoints run. `auto` picks Kubernetes when it is configured, else local processes
 * when the database is the embedded one (one process owns it, so one API runs the reconciler); with
 * DATABASE_URL and no cluster there may be several API replicas, so local mode must be asked for.
 */
export function runtimeKind(config: Config, inCluster: boolean): 'kubernetes' | 'local' | 'none' {
  if (config.BERTH_RUNTIME !== 'auto') return config.BERTH_RUNTIME;
  if (config.KUBECONFIG || inCluster) return 'kubernetes';
  return config.DATABASE_URL ? 'none' : 'local';
}

export { BILLING_FINALIZER } from './kubernetes/gpu-meter.ts';
export type { EndpointRuntime } from './ports.ts';
export { localRuntime, engineCommand } from './local/index.ts';
