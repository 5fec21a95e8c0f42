// A TCP proxy a test can cut: put it between the API and PostgreSQL (or anything else) to take the
// server away without touching it. `cut()` resets every open connection and stops listening, so new
// ones are refused (what a client sees when the server's host goes down); `restore()` listens again
// on the same port.
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  /** The proxy's port on 127.0.0.1. */
  port: number;
  /** Resets open connections and refuses new ones until `restore()`. */
  cut(): void;
  restore(): void;
  readonly isCut: boolean;
  /** Connections accepted so far (refused ones included). */
  readonly accepted: number;
  close(): Promise<void>;
}

export async function tcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const open = new Set<Socket>();
  let cut = false;
  let accepted = 0;
  const server: Server = createServer((client) => {
    accepted++;
    if (cut) {
      client.resetAndDestroy();
      return;
    }
    const upstream = connect(target.port, target.host);
    open.add(client);
    open.add(upstream);
    // A side that ends or fails ends the other after what it sent was passed on (a server's error
    // message before it closes must reach the client); only `cut()` resets.
    const drop = () => {
      open.delete(client);
      open.delete(upstream);
      client.end();
      upstream.end();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    cut() {
      if (cut) return;
      cut = true;
      server.close();
      for (const s of open) s.resetAndDestroy();
      open.clear();
    },
    restore() {
      if (!cut) return;
      cut = false;
      server.listen(port, '127.0.0.1');
    },
    get isCut() {
      return cut;
    },
    get accepted() {
      return accepted;
    },
    async close() {
      const listening = !cut;
      cut = true;
      for (const s of open) s.resetAndDestroy();
      if (listening) await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** `url` with its host and port replaced by the proxy's. */
export function throughProxy(url: string, proxy: Pick<TcpProxy, 'port'>): string {
  const u = new URL(url);
  u.hostname = '127.0.0.1';
  u.port = String(proxy.port);
  return u.toString();
}
