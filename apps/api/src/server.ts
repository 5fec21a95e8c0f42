// Composition root: configuration in, a listening API out. main.ts and the tests both use it. The
// port is bound first, then the data dir and the database, then the products' services
// (./services.ts), then the app; each part pushes its closer on one stack as it starts, and closing
// (or a start-up that fails half-way) pops them, the last started first.
import { existsSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { openMigratedDatabase, type Database } from '@berth/db';
import { createApp } from './app.ts';
import { expressClasses, requestListener } from './http/fast-entry.ts';
import { Closers } from './platform/closers.ts';
import { ConfigError, type Config } from './platform/config.ts';
import { lockDataDir } from './platform/data-dir-lock.ts';
import { takeInstanceLock } from './platform/instance-lock.ts';
import { ApiError } from './platform/errors.ts';
import { createLogger, type Logger } from './platform/logger.ts';
import { startTracing, tracingOptions, useTracing } from './platform/tracing.ts';
import type { KeyService } from './accounts/keys/service.ts';
import type { Billing } from './billing/index.ts';
import type { ChronosClock } from './chronos/index.ts';
import { LOCK_NAMESPACE } from './billing/leadership.ts';
import type { EndpointRuntime } from './dedicated/ports.ts';
import type { UsageRecorder } from './dedicated/proxy/usage.ts';
import { runtimeKind } from './dedicated/runtimes.ts';
import type { PlatformUpstream } from './dedicated/upstream/endpoint-upstream.ts';
import { startServices } from './services.ts';

/** The dashboard's static build (`npm run build -w @berth/web`). */
export const WEB_DIR = path.resolve(import.meta.dirname, '../../web/dist');

export interface RunningApi {
  url: string;
  port: number;
  adminToken: string;
  keys: KeyService;
  logger: Logger;
  /** The dedicated-endpoint runtime, when one is configured. */
  runtime?: EndpointRuntime;
  /** The proxy's upstream for those endpoints (wake, hold, replica choice). */
  upstream?: PlatformUpstream;
  usage?: UsageRecorder;
  /** Prepaid balances (the wallet is the hot path of paid calls), GPU metering, the job queue. */
  billing: Billing;
  /** Stops accepting, lets requests in flight finish (up to SHUTDOWN_GRACE_MS), closes the database. */
  close(): Promise<void>;
}

export async function startApi(
  config: Config,
  options: {
    logger?: Logger;
    /** The clock of GPU metering and invoices; tests move it. */
    now?: () => Date;
    /** The clock Chronos's schedules run on; tests run it faster. */
    chronosClock?: ChronosClock;
  } = {},
): Promise<RunningApi> {
  const logger = options.logger ?? createLogger(config.LOG_LEVEL);
  const inCluster =
    !!process.env.KUBERNETES_SERVICE_HOST &&
    existsSync('/var/run/secrets/kubernetes.io/serviceaccount/token');
  const kind = runtimeKind(config, inCluster);
  const closers = new Closers();
  // The port first: a busy one must stop the process before anything is written to the data dir.
  const bound = bindHost(config, inCluster);
  // Requests and responses are made as the app's (fast-entry.ts, expressClasses) once it is attached.
  const classes = expressClasses();
  const server = await bind(config.PORT, bound, config.BODY_TIMEOUT_MS, classes);
  closers.push(() => closeServer(server));
  try {
    // Before everything that makes spans, closed after them: the last spans are exported on the way out.
    const otlp = tracingOptions(config);
    if (otlp) {
      const tracing = await startTracing(otlp);
      const restore = useTracing(tracing);
      closers.push(() => (restore(), tracing.close()));
      logger.info({ traces: otlp.url, service: otlp.serviceName }, 'exporting OpenTelemetry traces');
    }
    const db = await openDatabase(config, kind, logger, closers);
    const services = await startServices({
      config,
      db,
      kind,
      logger,
      closers,
      ...(options.now ? { now: options.now } : {}),
      ...(options.chronosClock ? { chronosClock: options.chronosClock } : {}),
    });
    const { app: deps, dedicated } = services;
    const app = createApp({ ...deps, webDir: WEB_DIR });
    // Aborted when SHUTDOWN_GRACE_MS is up: proxied calls still running end with an SSE error frame
    // (or a 503), which the SDKs raise as an APIError, instead of a cut connection.
    const shutdown = new AbortController();
    app.locals.shutdown = shutdown.signal;
    classes.attach(app);
    server.off('request', starting);
    server.on('request', requestListener(app));
    // Receiving a request (headers and body) is time-limited: a client dripping a body cannot hold a
    // connection and its buffer forever. Node's limit ends once the request is received, so
    // responses (streams for the whole wall-clock limit) are not cut by it.
    server.requestTimeout = config.BODY_TIMEOUT_MS;
    server.headersTimeout = Math.min(60_000, config.BODY_TIMEOUT_MS);
    server.keepAliveTimeout = 65_000;
    // Closing starts by draining: no new connections, requests in flight may finish.
    closers.push(() => drain(server, shutdown, config.SHUTDOWN_GRACE_MS));
    const address = server.address() as AddressInfo;
    const { port } = address;
    deps.auth?.listening(address);
    const host = bound === '0.0.0.0' || bound === '::' ? '127.0.0.1' : bound;
    logger.info({ port, host: bound }, 'Berth API listening');
    logger.flush();

    let closing: Promise<void> | undefined;
    return {
      url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
      port,
      adminToken: deps.adminToken,
      keys: services.keys,
      logger,
      runtime: dedicated?.runtime,
      upstream: dedicated?.upstream,
      usage: dedicated?.usage,
      billing: services.billing,
      close: () =>
        (closing ??= (async () => {
          deps.lifecycle.shuttingDown = true;
          await closers.close();
          logger.info('Berth API stopped');
          logger.flush();
        })()),
    };
  } catch (err) {
    await closers.close();
    throw err;
  }
}

/**
 * The data dir's lock (it holds the embedded database and local mode's engine processes: one API
 * owns it) when it is used, and the database, migrated.
 */
async function openDatabase(
  config: Config,
  kind: 'kubernetes' | 'local' | 'none',
  logger: Logger,
  closers: Closers,
): Promise<Database> {
  if (!config.DATABASE_URL || kind === 'local') {
    const lock = await lockDataDir(config.BERTH_DATA_DIR);
    closers.push(() => lock.release());
    if (lock.stalePid)
      logger.warn(
        { file: lock.file, pid: lock.stalePid },
        'took over the data dir lock of a process that is gone',
      );
  }
  if (config.DATABASE_URL && kind === 'local') await lockLocalRuntime(config.DATABASE_URL, logger, closers);
  const db = await openMigratedDatabase(
    config.DATABASE_URL
      ? { kind: 'postgres', url: config.DATABASE_URL, poolSize: config.DB_POOL_SIZE }
      : { kind: 'embedded', dataDir: path.join(config.BERTH_DATA_DIR, 'db') },
  );
  closers.push(() => db.close());
  if (db.applied.length) logger.info({ migrations: db.applied }, 'applied database migrations');
  if (db.kind === 'embedded')
    logger.info(
      { dataDir: config.BERTH_DATA_DIR },
      'using the embedded database (set DATABASE_URL for PostgreSQL)',
    );
  return db;
}

/** The advisory lock of local mode on PostgreSQL (beside billing/leadership.ts's GPU_METER_LOCK = 1). */
export const LOCAL_RUNTIME_LOCK = 2;

/**
 * Local mode runs every endpoint's engine as a process of this API, so one API per database may run
 * it: a second one would start every engine again (with vLLM, two engines on one GPU). The data dir's
 * lock cannot see an API on another machine or with another BERTH_DATA_DIR; the database's can.
 */
async function lockLocalRuntime(url: string, logger: Logger, closers: Closers): Promise<void> {
  const taken = await takeInstanceLock({
    url,
    namespace: LOCK_NAMESPACE,
    key: LOCAL_RUNTIME_LOCK,
    role: 'local-runtime',
    logger,
  });
  if ('heldBy' in taken)
    throw new ConfigError(
      `Another Berth API${taken.heldBy ? ` (${taken.heldBy})` : ''} already runs the dedicated endpoints of this database in local mode (BERTH_RUNTIME=local): a second one would start every engine again (with vLLM, two engines on one GPU). Stop that API, point DATABASE_URL at another database, or run several replicas on Kubernetes (KUBECONFIG)`,
    );
  closers.push(() => taken.lock.release());
}

/**
 * Stops accepting and lets requests in flight finish; past the grace, proxied calls are ended with
 * an error their clients see (the shutdown signal), and a second later whatever is left is cut.
 */
async function drain(server: Server, shutdown: AbortController, graceMs: number): Promise<void> {
  const drained = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  let cut: NodeJS.Timeout | undefined;
  const grace = setTimeout(() => {
    shutdown.abort(
      new ApiError('service_unavailable', {
        message: `The API is shutting down: the call was cut after the shutdown grace (${graceMs} ms); retry`,
        headers: { 'retry-after': '1' },
      }),
    );
    // What the error frames did not end (other routes, slow clients) is cut a second later.
    cut = setTimeout(() => server.closeAllConnections(), 1_000);
  }, graceMs);
  await drained;
  clearTimeout(grace);
  clearTimeout(cut);
}

/** Until the app is assembled, the bound port answers 503 (a client that came early may retry). */
function starting(_req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' });
  res.end(JSON.stringify({ error: 'Berth is starting; retry in a moment', code: 'service_unavailable' }));
}

/** Listens, or explains in one line why it cannot (a ConfigError: the process exits 78). */
async function bind(
  port: number,
  host: string,
  bodyTimeoutMs: number,
  classes: Pick<ReturnType<typeof expressClasses>, 'IncomingMessage' | 'ServerResponse'>,
): Promise<Server> {
  // How often Node checks the request timeouts: a tenth of the limit, at most every second.
  const connectionsCheckingInterval = Math.max(100, Math.min(1_000, Math.floor(bodyTimeoutMs / 10)));
  const { IncomingMessage, ServerResponse } = classes;
  const server = createServer({ connectionsCheckingInterval, IncomingMessage, ServerResponse }, starting);
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
    server.listen(port, host);
  }).catch((err: NodeJS.ErrnoException) => {
    const where = `${host.includes(':') ? `[${host}]` : host}:${port}`;
    if (err.code === 'EADDRINUSE')
      throw new ConfigError(
        `Port ${port} is already in use on ${host}: stop what listens on ${where}, or set PORT to a free port`,
      );
    if (err.code === 'EACCES')
      throw new ConfigError(
        `Not allowed to listen on ${where} (ports below 1024 need privileges): set PORT to 1024 or above`,
      );
    if (err.code === 'EADDRNOTAVAIL' || err.code === 'ENOTFOUND')
      throw new ConfigError(
        `HOST ${host} is not an address of this machine: set HOST to one (e.g. 127.0.0.1 or 0.0.0.0)`,
      );
    throw err;
  });
  return server;
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

/**
 * Where the API listens when HOST is unset: every interface in a pod or next to a cluster (a Service
 * or ingress must reach it), only this machine in local mode (a laptop's quick start must not expose
 * the admin API to its network).
 */
export function bindHost(
  config: Pick<Config, 'HOST' | 'BERTH_RUNTIME' | 'KUBECONFIG'>,
  inCluster: boolean,
): string {
  if (config.HOST) return config.HOST;
  const cluster = inCluster || !!config.KUBECONFIG || config.BERTH_RUNTIME === 'kubernetes';
  return cluster ? '0.0.0.0' : '127.0.0.1';
}
