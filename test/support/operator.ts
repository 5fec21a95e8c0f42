import { fileURLToPath } from 'node:url';
import type { DedicatedEndpoint, DedicatedEndpointSpecInput } from '@berth/crds';
import { API_VERSION, CRD_NAME, DEFAULT_CATALOG, GROUP, KIND, PLURAL, VERSION } from '@berth/crds';
import type { KubeConfig, V1Deployment } from '@kubernetes/client-node';
import {
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  EventsV1Api,
  PatchStrategy,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { pino } from 'pino';
import { startOperator, type OperatorConfig, type OperatorHandle } from '@berth/operator';
import { kubectlOk, loadKubeConfig } from '../cluster/env.ts';
import { eventually } from './eventually.ts';

export const CRD_FILE = fileURLToPath(
  new URL('../../crds/generated/berth.dev_dedicatedendpoints.yaml', import.meta.url),
);

/** Install (or update) the generated CRD and wait until the API server serves it. */
export async function installCrd(): Promise<void> {
  await kubectlOk([
    'apply',
    '--server-side',
    '--force-conflicts',
    '--field-manager=berth-tests',
    '-f',
    CRD_FILE,
  ]);
  await kubectlOk(['wait', '--for=condition=Established', `crd/${CRD_NAME}`, '--timeout=60s']);
}

export function testConfig(
  namespace: string,
  hfEndpoint: string,
  overrides: Partial<OperatorConfig> = {},
): OperatorConfig {
  return {
    namespace,
    catalog: DEFAULT_CATALOG,
    hfEndpoint,
    engineImage: 'berth/engine-sim:dev',
    provisioningTimeoutSeconds: 600,
    wakeTimeoutSeconds: 600,
    startupTimeoutSeconds: 600,
    drainSeconds: 1,
    terminationGracePeriodSeconds: 5,
    modelCache: { kind: 'hostPath', path: '/var/lib/berth/hf-cache' },
    crashLoopRestarts: 3,
    gpuMemoryUtilization: 0.9,
    targetInFlightPerReplica: 16,
    metricsPort: 0,
    leaderElection: true,
    leaseNamespace: namespace,
    leaseName: 'berth-operator',
    identity: `test-${Math.random().toString(36).slice(2, 8)}`,
    resyncSeconds: 60,
    concurrency: 4,
    logLevel: process.env.LOG_LEVEL ?? 'warn',
    lease: { durationSeconds: 4, renewDeadlineSeconds: 3, retryPeriodSeconds: 1 },
    ...overrides,
  };
}

export function start(config: OperatorConfig): Promise<OperatorHandle> {
  return startOperator(config, { log: pino({ name: config.identity, level: config.logLevel }) });
}

export class Cluster {
  readonly namespace: string;
  readonly kc: KubeConfig = loadKubeConfig();
  readonly custom = this.kc.makeApiClient(CustomObjectsApi);
  readonly apps = this.kc.makeApiClient(AppsV1Api);
  readonly core = this.kc.makeApiClient(CoreV1Api);
  readonly events = this.kc.makeApiClient(EventsV1Api);

  constructor(namespace: string) {
    this.namespace = namespace;
  }

  async create(
    name: string,
    spec: DedicatedEndpointSpecInput,
    annotations: Record<string, string> = {},
  ): Promise<void> {
    await this.custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: this.namespace,
      plural: PLURAL,
      body: { apiVersion: API_VERSION, kind: KIND, metadata: { name, annotations }, spec },
    });
  }

  async get(name: string): Promise<DedicatedEndpoint | undefined> {
    try {
      return (await this.custom.getNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace: this.namespace,
        plural: PLURAL,
        name,
      })) as DedicatedEndpoint;
    } catch (err) {
      if ((err as { code?: number }).code === 404) return undefined;
      throw err;
    }
  }

  /** Merge patch, as the API does for annotations. */
  async mergePatch(name: string, body: object): Promise<void> {
    await this.custom.patchNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace: this.namespace, plural: PLURAL, name, body },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
  }

  async delete(name: string): Promise<void> {
    await this.custom.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: this.namespace,
      plural: PLURAL,
      name,
    });
  }

  /**
   * Drop our finalizer from every endpoint left in the namespace. Call after the operator stopped
   * and before deleting the namespace, or the namespace waits forever for an operator to come back.
   */
  async releaseAll(): Promise<void> {
    const list = (await this.custom.listNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: this.namespace,
      plural: PLURAL,
    })) as {
      items: DedicatedEndpoint[];
    };
    for (const ep of list.items) {
      if (ep.metadata.finalizers?.length)
        await this.mergePatch(ep.metadata.name, { metadata: { finalizers: null } }).catch(() => {});
    }
  }

  async deployment(name: string): Promise<V1Deployment | undefined> {
    try {
      return await this.apps.readNamespacedDeployment({ name, namespace: this.namespace });
    } catch (err) {
      if ((err as { code?: number }).code === 404) return undefined;
      throw err;
    }
  }

  async waitPhase(
    name: string,
    phase: string,
    timeout = 60_000,
    reason?: string,
  ): Promise<DedicatedEndpoint> {
    return eventually(
      async () => {
        const ep = await this.get(name);
        const s = ep?.status;
        if (s?.phase !== phase || (reason && s.reason !== reason)) {
          throw new Error(
            `${name} is ${s?.phase}/${s?.reason} (${s?.message}), want ${phase}${reason ? `/${reason}` : ''}`,
          );
        }
        return ep!;
      },
      { timeout, interval: 250, description: `${name} → ${phase}` },
    );
  }

  async eventReasons(name: string): Promise<string[]> {
    const list = await this.events.listNamespacedEvent({
      namespace: this.namespace,
      fieldSelector: `regarding.name=${name}`,
    });
    return list.items.map((e) => e.reason ?? '');
  }
}

/** An endpoint spec for the kwok cluster: 1 H100 by default, pods Ready after `readyAfter`. */
export function simSpec(
  model = 'org/small',
  podAnnotations: Record<string, string> = { 'sim.berth.dev/ready-after': '2s' },
  extra: Partial<DedicatedEndpointSpecInput> = {},
): DedicatedEndpointSpecInput {
  return {
    account: 'acct_test',
    model: { id: model },
    hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
    engine: { podAnnotations },
    ...extra,
  };
}
