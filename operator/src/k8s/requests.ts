import { GROUP, PLURAL, VERSION } from '@berth/crds';
import type { KubeConfig, KubernetesObject, RequestContext } from '@kubernetes/client-node';

// The operator's writes, sent straight over the shared connection. @kubernetes/client-node's typed
// clients run every request through a RequestContext, middleware promises, undici's fetch (web
// streams for the body) and an ObjectSerializer that walks the resource's whole model both ways; at
// N = 1,000 endpoints that HTTP stack was most of the operator's own CPU (BENCHMARKS.md, operator).
// The operator writes four kinds of request (apply a child, write a status, record an Event, drop
// a finalizer); here each is one undici `dispatcher.request` with a JSON body, on the dispatcher
// and credentials client-node itself would use (applySecurityAuthentication: TLS options, bearer
// tokens, exec plugins and their rotation; reuseConnections shares the connection), and the answer
// is the plain JSON object, as a watch delivers it. Errors carry `code` (the HTTP status) and
// `body` (the Status text) as client-node's ApiException does, so callers and errorText read both
// the same way.

/** What undici's Dispatcher offers that is used here (the dispatcher client-node builds). */
interface RequestDispatcher {
  request(options: {
    origin: string;
    path: string;
    method: string;
    headers: Record<string, string>;
    body?: string;
  }): Promise<{ statusCode: number; body: { text(): Promise<string> } }>;
}

/** An API server's refusal: `code` is the HTTP status, `body` the Status object's text. */
export class KubeApiError extends Error {
  readonly code: number;
  readonly body: string;

  constructor(code: number, body: string, method: string, path: string) {
    super(`HTTP ${code} from ${method} ${path.split('?')[0]}`);
    this.code = code;
    this.body = body;
    this.name = 'KubeApiError';
  }
}

export const APPLY_PATCH = 'application/apply-patch+yaml';
export const JSON_PATCH = 'application/json-patch+json';
export const MERGE_PATCH = 'application/merge-patch+json';

/** The REST path of the kinds the operator writes (no discovery round trip: these never move). */
const RESOURCES: Record<string, string> = {
  'apps/v1/Deployment': '/apis/apps/v1/namespaces/{ns}/deployments',
  'v1/Service': '/api/v1/namespaces/{ns}/services',
  'v1/PersistentVolumeClaim': '/api/v1/namespaces/{ns}/persistentvolumeclaims',
  'events.k8s.io/v1/Event': '/apis/events.k8s.io/v1/namespaces/{ns}/events',
  'inference.networking.k8s.io/v1/InferencePool':
    '/apis/inference.networking.k8s.io/v1/namespaces/{ns}/inferencepools',
};

export function resourcePath(apiVersion: string, kind: string, namespace: string, name?: string): string {
  const known = RESOURCES[`${apiVersion}/${kind}`];
  if (!known) throw new Error(`no REST path known for ${apiVersion} ${kind}`);
  const base = known.replace('{ns}', encodeURIComponent(namespace));
  return name ? `${base}/${encodeURIComponent(name)}` : base;
}

/** A DedicatedEndpoint's REST path, or its status subresource's. */
export function endpointPath(namespace: string, name: string, subresource?: 'status'): string {
  return `/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(namespace)}/${PLURAL}/${encodeURIComponent(name)}${subresource ? `/${subresource}` : ''}`;
}

/** A MicroTime as the API server expects it (RFC 3339 with microseconds). */
export function microTime(d = new Date()): string {
  return d.toISOString().replace(/(\.\d{3})Z$/, '$1000Z');
}

export class KubeRequests {
  private readonly kc: KubeConfig;
  private readonly origin: string;
  private readonly prefix: string;

  constructor(kc: KubeConfig) {
    this.kc = kc;
    const server = kc.getCurrentCluster()?.server;
    if (!server) throw new Error('No currently active cluster');
    const url = new URL(server);
    this.origin = url.origin;
    // A server address with a path (behind a proxy, say) keeps it in front of every request.
    this.prefix = url.pathname.replace(/\/+$/, '');
  }

  /** Server-side apply of `obj` (or of its status) under `fieldManager`, forcing ownership as the operator does. */
  apply<T extends KubernetesObject>(path: string, obj: object, fieldManager: string): Promise<T> {
    return this.send<T>(
      'PATCH',
      `${path}?fieldManager=${encodeURIComponent(fieldManager)}&force=true`,
      obj,
      APPLY_PATCH,
    );
  }

  /** One request; resolves with the parsed answer (undefined for an empty one), rejects with KubeApiError. */
  async send<T>(method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<T> {
    const headers: Record<string, string> = { Accept: 'application/json' };
    let dispatcher: RequestDispatcher | undefined;
    // client-node's own authentication step, on a minimal context: bearer tokens (refreshed by its
    // authenticators), basic auth, impersonation, and the TLS dispatcher (shared by reuseConnections).
    const ctx = {
      setHeaderParam: (k: string, v: string) => {
        headers[k] = v;
      },
      setDispatcher: (d: unknown) => {
        dispatcher = d as RequestDispatcher;
      },
    };
    await this.kc.applySecurityAuthentication(ctx as unknown as RequestContext);
    const text = body === undefined ? undefined : JSON.stringify(body);
    if (text !== undefined) headers['Content-Type'] = contentType;
    const target = this.prefix + path;
    let status: number;
    let answer: string;
    if (dispatcher) {
      const res = await dispatcher.request({
        origin: this.origin,
        path: target,
        method,
        headers,
        ...(text !== undefined ? { body: text } : {}),
      });
      status = res.statusCode;
      answer = await res.body.text();
    } else {
      // No TLS options (a plain-HTTP server, say): no dispatcher of client-node's; Node's fetch.
      const res = await fetch(this.origin + target, {
        method,
        headers,
        ...(text !== undefined ? { body: text } : {}),
      });
      status = res.status;
      answer = await res.text();
    }
    if (status >= 400) throw new KubeApiError(status, answer, method, target);
    return (answer ? JSON.parse(answer) : undefined) as T;
  }
}
