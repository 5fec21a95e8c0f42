// Small builders for the objects the cluster tests apply with kubectl.

export interface DeploymentOptions {
  replicas?: number;
  gpus?: number;
  /** Pod template annotations, e.g. the sim.berth.dev/* vocabulary of kwok/stages.yaml. */
  annotations?: Record<string, string>;
  nodeSelector?: Record<string, string>;
  tolerations?: { key: string; operator: string; effect?: string; tolerationSeconds?: number }[];
}

export function deployment(name: string, opts: DeploymentOptions = {}): object {
  const limits: Record<string, string> = { cpu: '1', memory: '1Gi' };
  if (opts.gpus) limits['nvidia.com/gpu'] = String(opts.gpus);
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name },
    spec: {
      replicas: opts.replicas ?? 1,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name }, annotations: opts.annotations ?? {} },
        spec: {
          ...(opts.nodeSelector ? { nodeSelector: opts.nodeSelector } : {}),
          ...(opts.tolerations ? { tolerations: opts.tolerations } : {}),
          containers: [{ name: 'main', image: 'registry.invalid/berth/sim:latest', resources: { limits } }],
        },
      },
    },
  };
}

/** The parts of a Pod the tests read. */
export interface Pod {
  metadata: { name: string; annotations?: Record<string, string> };
  spec: { nodeName?: string };
  status: {
    phase?: string;
    podIP?: string;
    conditions?: {
      type: string;
      status: string;
      reason?: string;
      message?: string;
      lastTransitionTime?: string;
    }[];
    containerStatuses?: {
      name: string;
      ready: boolean;
      restartCount: number;
      state?: { waiting?: { reason?: string }; running?: object; terminated?: { reason?: string } };
    }[];
  };
}

export function condition(pod: Pod, type: string) {
  return pod.status.conditions?.find((c) => c.type === type);
}
