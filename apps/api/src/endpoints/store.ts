// The API's view of DedicatedEndpoints: a cache kept by a watch, never a read per request, and the
// few writes the API makes (create, delete, activity and wake annotations).
import type { DedicatedEndpoint, DedicatedEndpointSpecInput } from '@berth/crds';

export interface EndpointStore {
  /** Resolves once the cache holds every endpoint. */
  ready(): Promise<void>;
  get(id: string): DedicatedEndpoint | undefined;
  list(): DedicatedEndpoint[];
  /**
   * Creates the endpoint. With `hubToken`, the token is stored where the engine reads it (a Secret
   * the endpoint owns, on Kubernetes) and the spec references it; stores that cannot keep a token
   * refuse it with an ApiError.
   */
  create(input: {
    id: string;
    displayName: string;
    spec: DedicatedEndpointSpecInput;
    hubToken?: string;
  }): Promise<DedicatedEndpoint>;
  /** False when it did not exist. */
  delete(id: string): Promise<boolean>;
  /** Merge-patches annotations on the endpoint (activity, wake requests). */
  annotate(id: string, annotations: Record<string, string>): Promise<void>;
  /** Called on every change of one endpoint (and with undefined when it is deleted). */
  watch(id: string, fn: (e: DedicatedEndpoint | undefined) => void): () => void;
  close(): Promise<void>;
}

/** Where an endpoint's ready replicas can be reached, learned from a watch. */
export interface Backends {
  ready(): Promise<void>;
  /** Base URLs (`http://ip:port`) of the endpoint's ready replicas, possibly empty. */
  addresses(id: string): readonly string[];
  /** Called whenever the endpoint's set of addresses changes. */
  watch(id: string, fn: (addresses: readonly string[]) => void): () => void;
  close(): Promise<void>;
}
