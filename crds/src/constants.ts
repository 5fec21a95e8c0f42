/** API coordinates of the DedicatedEndpoint custom resource. */
export const GROUP = 'berth.dev';
export const VERSION = 'v1alpha1';
export const KIND = 'DedicatedEndpoint';
export const LIST_KIND = 'DedicatedEndpointList';
export const PLURAL = 'dedicatedendpoints';
export const SINGULAR = 'dedicatedendpoint';
export const SHORT_NAMES = ['endpt'] as const;
export const API_VERSION = `${GROUP}/${VERSION}`;
export const CRD_NAME = `${PLURAL}.${GROUP}`;

/** Every endpoint id (= metadata.name) starts with this. */
export const ENDPOINT_ID_PREFIX = 'endpt-';

/**
 * RFC3339 time of the last proxied traffic. The API merge-patches it on metadata whenever it
 * proxies a request, and refreshes it at least every ACTIVITY_REFRESH_SECONDS while any request is in
 * flight, so an endpoint with a request in flight never looks idle.
 */
export const ANNOTATION_LAST_ACTIVITY = 'berth.dev/last-activity';
/** RFC3339 time a request or an explicit wake reached a hibernated endpoint. Set by the API. */
export const ANNOTATION_WAKE_REQUESTED = 'berth.dev/wake-requested-at';
/**
 * RFC3339 time the API forwarded the first byte of an answer to a call held through a wake; written
 * once per wake by the API, copied by the operator into status.lastWake.firstByteAt.
 */
export const ANNOTATION_WAKE_FIRST_BYTE = 'berth.dev/wake-first-byte-at';
/**
 * Optional: requests the API currently has in flight (or waiting) for this endpoint, written with
 * ANNOTATION_LAST_ACTIVITY. The operator scales between min and max replicas on it, and ignores it
 * once the last-activity annotation is older than 3 × ACTIVITY_REFRESH_SECONDS (a crashed API).
 */
export const ANNOTATION_IN_FLIGHT = 'berth.dev/in-flight';
/** The name a user gave the endpoint when creating it through the API (the id otherwise). */
export const ANNOTATION_DISPLAY_NAME = 'berth.dev/display-name';
/** The API refreshes ANNOTATION_LAST_ACTIVITY at least this often while a request is in flight. */
export const ACTIVITY_REFRESH_SECONDS = 10;

/** Labels the operator puts on every child (Deployment, Service, pods, PVC). */
export const LABEL_ENDPOINT = 'berth.dev/endpoint';
export const LABEL_ACCOUNT = 'berth.dev/account';
export const LABEL_MANAGED_BY = 'app.kubernetes.io/managed-by';
export const LABEL_COMPONENT = 'app.kubernetes.io/component';
/** Hash of the inputs a child was built from; a changed hash means drift or a spec change. */
export const LABEL_SPEC_HASH = 'berth.dev/spec-hash';
/** Node label naming the instance type a GPU node belongs to (the catalog's default nodeSelector). */
export const LABEL_GPU_TYPE = 'berth.dev/gpu-type';
export const MANAGED_BY = 'berth-operator';

/** Finalizer that holds the endpoint until effects outside the cluster (the termination hook) are done. */
export const FINALIZER = 'berth.dev/finalizer';
/** Server-side apply field manager: the operator's one identity for every write. */
export const FIELD_MANAGER = 'berth-operator';

/** Port vLLM's OpenAI server listens on in the pod, and the Service port. */
export const ENGINE_PORT = 8000;
