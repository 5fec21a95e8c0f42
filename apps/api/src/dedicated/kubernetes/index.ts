// The Kubernetes runtime's adapters for the API: the endpoint cache and writes, the pod watch that
// tells where replicas listen, and the log reader, all in BERTH_NAMESPACE.
import { KubeConfig } from '@kubernetes/client-node';
import { reuseConnections } from '@berth/operator';
import type { Logger } from 'pino';
import type { Backends, EndpointLogs, Endpoints } from '../ports.ts';
import { k8sEndpoints } from './endpoints.ts';
import { k8sEndpointLogs } from './logs.ts';
import { operatorWake } from './operator-wake.ts';
import { k8sBackends } from './pods.ts';

export function loadKubeConfig(kubeconfig?: string): KubeConfig {
  const kc = new KubeConfig();
  if (kubeconfig) kc.loadFromFile(kubeconfig);
  else kc.loadFromCluster();
  // One keep-alive connection pool, not a TLS handshake per request (see the operator's connections.ts).
  return reuseConnections(kc);
}

export function kubernetesAdapters(
  kubeconfig: string | undefined,
  namespace: string,
  logger: Logger,
  /** The operator's POST /wake (BERTH_OPERATOR_URL, BERTH_WAKE_TOKEN); unset: the annotation alone. */
  operator?: { url: string; token: string },
): { endpoints: Endpoints; backends: Backends; logs: EndpointLogs } {
  const kc = loadKubeConfig(kubeconfig);
  const wake = operator ? operatorWake(operator.url, operator.token, logger) : undefined;
  return {
    endpoints: k8sEndpoints(kc, namespace, logger, wake),
    backends: k8sBackends(kc, namespace, logger),
    logs: k8sEndpointLogs(kc, namespace),
  };
}
