import type { Cluster, KubeConfig } from '@kubernetes/client-node';
import type { AgentOptions } from 'node:https';

// @kubernetes/client-node 2.x builds a new undici Agent for every request (KubeConfig's private
// createDispatcher, called from applySecurityAuthentication), so every request opens its own TLS
// connection: a full handshake, with the client certificate verified on the API server's side, and
// a socket left open until it idles out. An operator bringing 1,000 endpoints up makes thousands of
// requests; on a loaded control plane each one then took seconds. Here the dispatcher is made once
// per set of TLS options (cluster address, CA, client certificate) and reused, as client-go does:
// the requests share a few keep-alive connections. Credentials sent as headers (tokens, exec
// plugins) are applied per request as before; new TLS options (a rotated client certificate) get a
// new dispatcher and the old one is closed once its requests are done.

type WithDispatcher = {
  createDispatcher(
    cluster: Cluster | null,
    agentOptions: AgentOptions,
  ): { close(): Promise<void> } | undefined;
};
const REUSED = Symbol.for('berth.reuseConnections');

/** The agent options client-node builds a dispatcher from (KubeConfig.createDispatcherOptions). */
const TLS_FIELDS = ['ca', 'cert', 'key', 'pfx', 'passphrase', 'rejectUnauthorized', 'servername'] as const;

/**
 * The same TLS options as last time? Compared field by field (the certificates are the same
 * strings or buffers on every request), because serialising them to compare, on every request,
 * cost the operator measurable CPU at thousands of requests.
 */
function sameTls(a: AgentOptions, b: AgentOptions): boolean {
  return TLS_FIELDS.every((f) => {
    const x: unknown = a[f];
    const y: unknown = b[f];
    return x === y || (Buffer.isBuffer(x) && Buffer.isBuffer(y) && x.equals(y));
  });
}

export function reuseConnections(kc: KubeConfig): KubeConfig {
  const k = kc as unknown as WithDispatcher & { [REUSED]?: true };
  if (k[REUSED] || typeof k.createDispatcher !== 'function') return kc;
  const create = k.createDispatcher.bind(kc);
  let current:
    | {
        cluster: Cluster | null;
        agentOptions: AgentOptions;
        key: string;
        dispatcher: ReturnType<WithDispatcher['createDispatcher']>;
      }
    | undefined;
  k.createDispatcher = (cluster, agentOptions) => {
    if (current && current.cluster === cluster && sameTls(current.agentOptions, agentOptions))
      return current.dispatcher;
    const key = JSON.stringify(kc.createDispatcherOptions(cluster, agentOptions));
    if (current?.key !== key) {
      void current?.dispatcher?.close().catch(() => {});
      current = { cluster, agentOptions, key, dispatcher: create(cluster, agentOptions) };
    } else current = { ...current, cluster, agentOptions };
    return current.dispatcher;
  };
  k[REUSED] = true;
  return kc;
}
