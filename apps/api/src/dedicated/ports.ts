// The API's ports onto where endpoints run (Kubernetes or local processes). Each runtime implements
// them; routes and the proxy see only these.
import type { Writable } from 'node:stream';
import type { DedicatedEndpoint, DedicatedEndpointSpecInput } from '@berth/crds';

/**
 * The API's read cache of DedicatedEndpoints, kept by a watch (an informer on Kubernetes, the local
 * store's own cache): never a read of the source per request.
 */
export interface EndpointCache {
  /** Resolves once the cache holds every endpoint. */
  ready(): Promise<void>;
  get(id: string): DedicatedEndpoint | undefined;
  list(): DedicatedEndpoint[];
  /** Called on every change of one endpoint (and with undefined when it is deleted). */
  watch(id: string, fn: (e: DedicatedEndpoint | undefined) => void): () => void;
  close(): Promise<void>;
}

/** The few writes the API makes to endpoints; they come back through the cache's watch. */
export interface EndpointWrites {
  /**
   * Creates the endpoint. With `hubToken`, the token is stored where the engine reads it (a Secret
   * the endpoint owns, on Kubernetes) and the spec references it; runtimes that cannot keep a token
   * refuse it with an ApiError.
   */
  create(input: {
    id: string;
    displayName: string;
    spec: DedicatedEndpointSpecInput;
    hubToken?: string;
  }): Promise<DedicatedEndpoint>;
  /**
   * Replaces the endpoint's spec and display name: a changed spec is a new generation, which the
   * reconciler builds (again, after a failure). Rejects with ApiError `endpoint_conflict` when the
   * endpoint changed since `generation` (or concurrently, on Kubernetes), `not_found` when it is gone.
   */
  update(
    id: string,
    input: { displayName: string; spec: DedicatedEndpointSpecInput; generation?: number },
  ): Promise<DedicatedEndpoint>;
  /** False when it did not exist. */
  delete(id: string): Promise<boolean>;
  /**
   * Every endpoint as its source holds it now (a read of the Kubernetes API server, not the
   * informer): for checks that must see a write made a moment ago, on this replica or another
   * (quotas). Not for the request path.
   */
  listFresh(): Promise<DedicatedEndpoint[]>;
  /** Merge-patches annotations on the endpoint (activity, wake requests). */
  annotate(id: string, annotations: Record<string, string>): Promise<void>;
  /**
   * Tells the runtime at once that a wake was requested at `requestedAt` (the wake annotation's
   * value), where it can hear it before the annotation's write (the operator's POST /wake).
   * Best effort, never throws; absent where the annotation is as fast.
   */
  signalWake?(id: string, requestedAt: string): void;
}

export type Endpoints = EndpointCache & EndpointWrites;

/** Where an endpoint's ready replicas can be reached, learned from a watch. */
export interface Backends {
  ready(): Promise<void>;
  /**
   * Base URLs (`http://ip:port`) of the endpoint's ready replicas, possibly empty. The same array is
   * returned until the set changes, so callers may keep state per array.
   */
  addresses(id: string): readonly string[];
  /** Called whenever the endpoint's set of addresses changes. */
  watch(id: string, fn: (addresses: readonly string[]) => void): () => void;
  close(): Promise<void>;
}

/** GET /api/endpoints/{id}/logs: status, events, then the replicas' output. */
export interface EndpointLogs {
  stream(
    e: DedicatedEndpoint,
    out: Writable,
    options: { follow: boolean; signal: AbortSignal },
  ): Promise<void>;
}

/** One runtime's adapters, as the API composes them. */
export interface EndpointRuntime {
  kind: 'kubernetes' | 'local';
  endpoints: Endpoints;
  backends: Backends;
  logs: EndpointLogs;
  /** Resolves once the caches are filled. */
  ready(): Promise<void>;
  close(): Promise<void>;
}
