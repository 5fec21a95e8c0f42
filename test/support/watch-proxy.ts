// A plain-HTTP proxy in front of the Kubernetes API server that a test can use to break watches:
// the client under test gets a kubeconfig pointing here (no TLS, no credentials); the proxy adds the
// real cluster's credentials. `blockWatches()` drops every open watch and answers new ones 503 until
// `unblockWatches(expire)`; with `expire`, the next watch of each resource gets the API server's
// `410 Gone` (an ERROR event, "too old resource version"), forcing a relist.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { writeFileSync } from 'node:fs';
import type { KubeConfig } from '@kubernetes/client-node';

export interface WatchProxy {
  /** A kubeconfig file pointing at the proxy. */
  kubeconfig: string;
  blockWatches(): void;
  unblockWatches(expire: boolean): void;
  /** Watches dropped, refused (503) and expired (410) so far. */
  readonly stats: { dropped: number; refused: number; expired: number; watches: number };
  close(): Promise<void>;
}

export async function watchProxy(kc: KubeConfig, kubeconfigFile: string): Promise<WatchProxy> {
  const server = new URL(kc.getCurrentCluster()!.server);
  const tls: RequestOptions = {};
  await kc.applyToHTTPSOptions(tls);
  const watches = new Set<ServerResponse>();
  let blocked = false;
  const expireFor = new Set<string>();
  // The resources watched so far: after a block, each one's next watch may be expired.
  const knownPaths = new Set<string>();
  const stats = { dropped: 0, refused: 0, expired: 0, watches: 0 };

  const http = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const isWatch = url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1';
    if (isWatch) {
      stats.watches++;
      knownPaths.add(url.pathname);
      if (blocked) {
        stats.refused++;
        res.writeHead(503, { 'content-type': 'application/json' }).end('{"kind":"Status","code":503}');
        return;
      }
      if (expireFor.delete(url.pathname)) {
        stats.expired++;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            type: 'ERROR',
            object: {
              kind: 'Status',
              apiVersion: 'v1',
              status: 'Failure',
              message: 'too old resource version',
              reason: 'Expired',
              code: 410,
            },
          }) + '\n',
        );
        return;
      }
      watches.add(res);
      res.once('close', () => watches.delete(res));
    }
    const headers = { ...req.headers, host: server.host };
    delete headers.authorization;
    const up = httpsRequest(
      { ...tls, hostname: server.hostname, port: server.port, method: req.method, path: req.url, headers },
      (upRes) => {
        res.writeHead(upRes.statusCode ?? 502, upRes.headers);
        upRes.pipe(res);
      },
    );
    up.on('error', () => res.destroy());
    res.once('close', () => up.destroy());
    req.pipe(up);
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const port = (http.address() as { port: number }).port;
  writeFileSync(
    kubeconfigFile,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      // client-node refuses a plain-HTTP server unless TLS verification is off for it.
      clusters: [
        { name: 'proxy', cluster: { server: `http://127.0.0.1:${port}`, 'insecure-skip-tls-verify': true } },
      ],
      users: [{ name: 'proxy', user: { token: 'via-proxy' } }],
      contexts: [{ name: 'proxy', context: { cluster: 'proxy', user: 'proxy' } }],
      'current-context': 'proxy',
    }),
  );
  return {
    kubeconfig: kubeconfigFile,
    blockWatches() {
      blocked = true;
      for (const w of watches) {
        stats.dropped++;
        w.destroy();
      }
      watches.clear();
    },
    unblockWatches(expire) {
      blocked = false;
      if (expire) for (const p of knownPaths) expireFor.add(p);
    },
    stats,
    async close() {
      for (const w of watches) w.destroy();
      await new Promise<void>((r) => http.close(() => r()));
    },
  };
}
