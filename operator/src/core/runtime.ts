import type { DedicatedEndpoint, DedicatedEndpointStatus, InstanceType, ModelSource } from '@berth/crds';
import type { HubToken } from './preflight.ts';
import type { ObservedWorkload, PhaseEvent, PreflightResult } from './types.ts';

// The narrow interface between the reconcile loop and a runtime: Kubernetes (k8s/) or processes on
// one machine (local/). Reads come from the runtime's cache; writes are idempotent.

export interface EndpointStore {
  /** The endpoint from the cache, by key "namespace/name". */
  get(key: string): DedicatedEndpoint | undefined;
  /** Replace status (one write per pass). */
  writeStatus(ep: DedicatedEndpoint, status: DedicatedEndpointStatus): Promise<void>;
  setFinalizer(ep: DedicatedEndpoint, present: boolean): Promise<void>;
  recordEvent(ep: DedicatedEndpoint, event: PhaseEvent): Promise<void>;
}

export interface WorkloadDriver {
  observe(ep: DedicatedEndpoint): Promise<ObservedWorkload>;
  /**
   * Make the workload match: the engine at `replicas` (0 keeps the definition but runs nothing).
   * `instanceType` is undefined when the hardware is not in the catalog: then only scale to zero.
   */
  apply(ep: DedicatedEndpoint, instanceType: InstanceType | undefined, replicas: number): Promise<void>;
  /**
   * The endpoint's address for `status.url` (informational, for kubectl users: the API's proxy
   * dials the Ready replicas it watches, not this).
   */
  url(ep: DedicatedEndpoint): string;
  /**
   * Can this runtime read the weights of a source other than the hub (spec.model.source)? Checked
   * once per generation before anything starts; a source it cannot read fails the endpoint at once.
   */
  checkSource(ep: DedicatedEndpoint, source: Exclude<ModelSource, { kind: 'hub' }>): Promise<PreflightResult>;
  /** The hub token named by spec.model.hubTokenSecretRef. */
  hubToken(ep: DedicatedEndpoint): Promise<HubToken>;
}

/** Effects outside the runtime that must happen before an endpoint is gone (billing). */
export interface TerminationHook {
  onTerminate(ep: DedicatedEndpoint): Promise<void>;
}
