// Composition root: configuration in, a listening API out. main.ts and the tests both use it.
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { loadMigrations, openMigratedDatabase } from '@berth/db';
import { createApp, requestListener } from './app.ts';
import { ConfigError, type Config } from './config.ts';
import { ApiError } from './errors.ts';
import { databaseUnavailable } from './db-unavailable.ts';
import { lockDataDir, type DataDirLock } from './data-dir-lock.ts';
import { keyHasher } from './keys/format.ts';
import { localRevocationBus, postgresRevocationBus, type RevocationBus } from './keys/revocation-bus.ts';
import { keyService, type KeyService } from './keys/service.ts';
import { createLogger, type Logger } from './logger.ts';
import { createMetrics } from './metrics.ts';
import { endpointMetrics, type EndpointMetrics } from './endpoints/metrics.ts';
import { healthRepository, keyRepository } from './repositories/keys.ts';
import { usageRepository } from './repositories/usage.ts';
import { accountRepository, databaseAccountLock } from './repositories/accounts.ts';
import { effectiveQuotas } from './quotas.ts';
import { loadCatalog } from '@berth/crds';
import { existsSync } from 'node:fs';
import {
  kubernetesGpuMeter,
  kubernetesRuntime,
  localRuntime,
  type EndpointRuntime,
} from './endpoints/index.ts';
import { GPU_METER_LOCK, pgLeadership, soleLeadership, type Leadership } from './billing/leadership.ts';
import { gpuMeterMetrics } from './billing/metrics.ts';
import { proxyAgent } from './proxy/agent.ts';
import { memoryRateLimiter, redisRateLimiter, type RateLimiter } from './proxy/ratelimit.ts';
import { importSpooledUsage, usageRecorder, type UsageRecorder } from './proxy/usage.ts';
import { platformUpstream, type PlatformUpstream } from './upstream/platform.ts';
import type { Agent } from 'undici';
import type { Lifecycle } from './routes/health.ts';
import { startBilling, type Billing } from './billing/index.ts';
import { dashboardAuth, type DashboardAuth } from './auth/index.ts';

/** The dashboard's static build (`npm run build -w @berth/web`). */
export const WEB_DIR = path.resolve(import.meta.dirname, '../../web/dist');
import { toolRepository } from './repositories/tools.ts';
import { olympusRepository } from './repositories/olympus.ts';
import { routeMatcher } from './olympus/routing.ts';
import { newSecretsKey, parseSecretsKey, sealer, type Sealer } from './secrets/sealed.ts';
import { startElastic, type Elastic } from './elastic/index.ts';
import { startChronos, type Chronos } from './chronos/index.ts';
import { chronosRepository } from './chronos/repository.ts';

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
  } = {},
): Promise<RunningApi> {
  const logger = options.logger ?? createLogger(config.LOG_LEVEL);
  const inCluster =
    !!process.env.KUBERNETES_SERVICE_HOST &&
    existsSync('/var/run/secrets/kubernetes.io/serviceaccount/token');
  const kind = runtimeKind(config, inCluster);
  // The port first: a busy one must stop the process before anything is written to the data dir.
  const server = await bind(config.PORT, bindHost(config, inCluster), config.BODY_TIMEOUT_MS);
  let lock: DataDirLock | undefined;
  let db: Awaited<ReturnType<typeof openMigratedDatabase>>;
  try {
    // The data dir holds the embedded database and local mode's engine processes: one API owns it.
    if (!config.DATABASE_URL || kind === 'local') {
      lock = await lockDataDir(config.BERTH_DATA_DIR);
      if (lock.stalePid)
        logger.warn(
          { file: lock.file, pid: lock.stalePid },
          'took over the data dir lock of a process that is gone',
        );
    }
    db = await openMigratedDatabase(
      config.DATABASE_URL
        ? { kind: 'postgres', url: config.DATABASE_URL, poolSize: config.DB_POOL_SIZE }
        : { kind: 'embedded', dataDir: path.join(config.BERTH_DATA_DIR, 'db') },
    );
  } catch (err) {
    await lock?.release();
    await closeServer(server);
    throw err;
  }
  if (db.applied.length) logger.info({ migrations: db.applied }, 'applied database migrations');
  if (db.kind === 'embedded')
    logger.info(
      { dataDir: config.BERTH_DATA_DIR },
      'using the embedded database (set DATABASE_URL for PostgreSQL)',
    );

  let bus: RevocationBus | undefined;
  let keys: KeyService | undefined;
  let runtime: EndpointRuntime | undefined;
  let usage: UsageRecorder | undefined;
  let limiter: RateLimiter | undefined;
  let upstream: PlatformUpstream | undefined;
  let dispatcher: Agent | undefined;
  let billing: Billing | undefined;
  let gpuMeter: Leadership | undefined;
  let auth: DashboardAuth | undefined;
  let elastic: Elastic | undefined;
  let chronos: Chronos | undefined;
  try {
    const catalog = loadCatalog(config.BERTH_CATALOG_FILE);
    const metrics = createMetrics();
    const now = options.now ?? (() => new Date());
    billing = await startBilling({
      config,
      db,
      catalog,
      logger,
      registry: metrics.registry,
      ...(options.now ? { now: options.now } : {}),
    });
    let epMetrics: EndpointMetrics | undefined;
    if (kind === 'kubernetes') {
      runtime = kubernetesRuntime(config, logger);
    } else if (kind === 'local') {
      runtime = await localRuntime({ config, logger, prisma: db.prisma, catalog, gpu: billing.gpu, now });
    } else {
      logger.warn(
        'no Kubernetes configured (KUBECONFIG unset) and DATABASE_URL set: dedicated endpoints are disabled (BERTH_RUNTIME=local runs them as processes of this API, one API process only)',
      );
    }
    if (runtime) {
      const spoolDir = path.join(config.BERTH_DATA_DIR, 'usage-spool');
      await importSpooledUsage(usageRepository(db.prisma), spoolDir, logger);
      usage = usageRecorder(usageRepository(db.prisma), logger, config.USAGE_FLUSH_INTERVAL_MS, { spoolDir });
      limiter = config.REDIS_URL ? await redisRateLimiter(config.REDIS_URL, logger) : memoryRateLimiter();
      await runtime.ready();
      epMetrics = endpointMetrics(metrics.registry, runtime.endpoints);
      upstream = platformUpstream({
        endpoints: runtime.endpoints,
        backends: runtime.backends,
        logger,
        onWoken: epMetrics.woken,
        // Local mode: this one API process starts every engine and sends it every call, so the
        // engines' own counts are its own: nothing to sample.
        engineLoadIntervalMs: kind === 'local' ? 0 : config.ENGINE_LOAD_SAMPLE_MS,
        onEngineSample: (outcome) => metrics.engineLoadSamples.inc({ outcome }),
      });
      if (kind === 'kubernetes')
        logger.info({ namespace: config.BERTH_NAMESPACE }, 'watching dedicated endpoints');
    }
    dispatcher = proxyAgent();
    const adminToken = config.ADMIN_TOKEN ?? (await embeddedAdminToken(config.BERTH_DATA_DIR, logger));
    bus = config.DATABASE_URL
      ? await postgresRevocationBus({
          url: config.DATABASE_URL,
          ackTimeoutMs: config.REVOCATION_ACK_TIMEOUT_MS,
          logger,
        })
      : localRevocationBus();
    if (kind === 'kubernetes') {
      const meterMetrics = gpuMeterMetrics(metrics.registry);
      const work = kubernetesGpuMeter(config, {
        gpu: billing.gpu,
        logger,
        now,
        onSync: meterMetrics.sync,
      });
      // Exactly one API replica meters GPU time; on the embedded database there is only one.
      gpuMeter = config.DATABASE_URL
        ? pgLeadership({
            url: config.DATABASE_URL,
            lock: GPU_METER_LOCK,
            name: 'gpu-meter',
            work,
            logger,
            onChange: meterMetrics.leading,
          })
        : soleLeadership(work, logger);
    }
    const secrets = await secretsSealer(config, logger);
    elastic = await startElastic({
      config,
      db,
      logger,
      wallet: billing.wallet,
      dispatcher,
      ...(secrets ? { sealer: secrets } : {}),
      ...(runtime && upstream ? { platform: { endpoints: runtime.endpoints, upstream } } : {}),
    });
    const tools = toolRepository(db.prisma);
    const olympus = olympusRepository(db.prisma);
    // One matcher (and its cache of example embeddings) for the Elastic routes, the dry run and
    // Chronos's `auto` steps: they choose with the same routes.
    const olympusRoutes = routeMatcher({
      catalog: elastic.catalog,
      caller: elastic.caller,
      timeoutMs: config.OLYMPUS_ROUTE_TIMEOUT_MS,
      logger,
      count: (outcome) => metrics.olympusRoutes.inc({ outcome }),
    });
    chronos = await startChronos({
      jobs: billing.jobs,
      repo: chronosRepository(db.prisma),
      steps: {
        wallet: billing.wallet,
        catalog: elastic.catalog,
        caller: elastic.caller,
        tools,
        olympus,
        routes: olympusRoutes,
        logger,
        ...(secrets ? { sealer: secrets } : {}),
      },
      config: {
        enabled: config.CHRONOS_ENABLED,
        fee: config.CHRONOS_RUN_FEE,
        stepTimeoutMs: config.CHRONOS_STEP_TIMEOUT_MS,
        concurrency: config.CHRONOS_CONCURRENCY,
        pollSeconds: config.CHRONOS_POLL_SECONDS,
        prewarmSeconds: config.CHRONOS_PREWARM_SECONDS,
      },
      logger,
      registry: metrics.registry,
      ...(runtime && upstream ? { platform: { endpoints: runtime.endpoints, upstream } } : {}),
    });
    keys = keyService({
      repo: keyRepository(db.prisma),
      hash: keyHasher(config.KEY_HASH_SECRET),
      bus,
      metrics: {
        cacheLookup: (result) => metrics.keyCacheCells.add(1, result),
        revocation: (outcome) => metrics.keyRevocations.inc({ outcome }),
      },
      touchIntervalMs: config.KEY_TOUCH_INTERVAL_MS,
      keyQuota: config.BERTH_QUOTA_KEYS,
      outageGraceMs: config.KEY_OUTAGE_GRACE_MS,
      isOutage: (err) => databaseUnavailable(err) !== undefined,
    });
    auth = dashboardAuth({ config, prisma: db.prisma, adminToken, logger });
    const lifecycle: Lifecycle = { shuttingDown: false };
    const accounts = accountRepository(db.prisma);
    const quotaDefaults = {
      keys: config.BERTH_QUOTA_KEYS,
      endpoints: config.BERTH_QUOTA_ENDPOINTS,
      gpus: config.BERTH_QUOTA_GPUS,
    };
    const app = createApp({
      config,
      adminToken,
      keys,
      health: healthRepository(db.prisma, (await loadMigrations()).migrationDirectories.at(-1)?.path),
      accounts,
      quotaDefaults,
      metrics,
      logger,
      lifecycle,
      catalog,
      endpoints:
        runtime && upstream && dispatcher && usage && limiter
          ? {
              runtime,
              upstream,
              dispatcher,
              usage,
              limiter,
              ...(epMetrics ? { metrics: epMetrics } : {}),
              quotas: async (accountId: string) =>
                effectiveQuotas(quotaDefaults, await accounts.quotas(accountId)),
              // On Kubernetes several API replicas may write one account's endpoints: the lock is
              // the database's. Local endpoints have one process, and its lock is enough.
              ...(kind === 'kubernetes' && db.kind !== 'embedded'
                ? { accountLock: databaseAccountLock(db.prisma) }
                : {}),
            }
          : undefined,
      billing,
      auth,
      webDir: WEB_DIR,
      tools: { tools, ...(secrets ? { sealer: secrets } : {}) },
      elastic,
      olympus,
      olympusRoutes,
      chronos: { chronos, tools, catalog: elastic.catalog, wallet: billing.wallet },
    });

    // Aborted when SHUTDOWN_GRACE_MS is up: proxied calls still running end with an SSE error frame
    // (or a 503), which the SDKs raise as an APIError, instead of a cut connection.
    const shutdown = new AbortController();
    app.locals.shutdown = shutdown.signal;
    server.off('request', starting);
    server.on('request', requestListener(app));
    // Receiving a request (headers and body) is time-limited: a client dripping a body cannot hold a
    // connection and its buffer forever. Node's limit ends once the request is received, so
    // responses (streams for the whole wall-clock limit) are not cut by it.
    server.requestTimeout = config.BODY_TIMEOUT_MS;
    server.headersTimeout = Math.min(60_000, config.BODY_TIMEOUT_MS);
    server.keepAliveTimeout = 65_000;
    const { port } = server.address() as AddressInfo;
    auth.listening(port);
    const bound = bindHost(config, inCluster);
    const host = bound === '0.0.0.0' || bound === '::' ? '127.0.0.1' : bound;
    logger.info({ port, host: bound }, 'Berth API listening');
    logger.flush();

    const k = keys;
    const b = bus;
    const rt = runtime;
    const u = usage;
    const l = limiter;
    const up = upstream;
    const d = dispatcher;
    const bill = billing;
    const meter = gpuMeter;
    const au = auth;
    const el = elastic;
    const chr = chronos;
    let closing: Promise<void> | undefined;
    return {
      url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
      port,
      adminToken,
      keys: k,
      logger,
      runtime: rt,
      upstream: up,
      usage: u,
      billing: bill,
      close: () =>
        (closing ??= (async () => {
          lifecycle.shuttingDown = true;
          const drained = new Promise<void>((resolve) => server.close(() => resolve()));
          server.closeIdleConnections();
          let cut: NodeJS.Timeout | undefined;
          const grace = setTimeout(() => {
            shutdown.abort(
              new ApiError('service_unavailable', {
                message: `The API is shutting down: the call was cut after the shutdown grace (${config.SHUTDOWN_GRACE_MS} ms); retry`,
                headers: { 'retry-after': '1' },
              }),
            );
            // What the error frames did not end (other routes, slow clients) is cut a second later.
            cut = setTimeout(() => server.closeAllConnections(), 1_000);
          }, config.SHUTDOWN_GRACE_MS);
          await drained;
          clearTimeout(grace);
          clearTimeout(cut);
          await meter?.close();
          await up?.close();
          await rt?.close();
          await d?.close();
          await u?.close();
          await l?.close();
          await chr.close();
          await el.close();
          await bill.close();
          au.close();
          await k.close();
          await b.close();
          await db.close();
          await lock?.release();
          logger.info('Berth API stopped');
          logger.flush();
        })()),
    };
  } catch (err) {
    await gpuMeter?.close();
    await upstream?.close();
    await runtime?.close();
    await dispatcher?.close();
    await usage?.close();
    await limiter?.close();
    await chronos?.close();
    await elastic?.close();
    await billing?.close();
    auth?.close();
    await keys?.close();
    await bus?.close();
    await db.close();
    await lock?.release();
    await closeServer(server);
    throw err;
  }
}

/** Until the app is assembled, the bound port answers 503 (a client that came early may retry). */
function starting(_req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' });
  res.end(JSON.stringify({ error: 'Berth is starting; retry in a moment', code: 'service_unavailable' }));
}

/** Listens, or explains in one line why it cannot (a ConfigError: the process exits 78). */
async function bind(port: number, host: string, bodyTimeoutMs: number): Promise<Server> {
  // How often Node checks the request timeouts: a tenth of the limit, at most every second.
  const connectionsCheckingInterval = Math.max(100, Math.min(1_000, Math.floor(bodyTimeoutMs / 10)));
  const server = createServer({ connectionsCheckingInterval }, starting);
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

/**
 * Where dedicated endpoints run. `auto` picks Kubernetes when it is configured, else local processes
 * when the database is the embedded one (one process owns it, so one API runs the reconciler); with
 * DATABASE_URL and no cluster there may be several API replicas, so local mode must be asked for.
 */
export function runtimeKind(config: Config, inCluster: boolean): 'kubernetes' | 'local' | 'none' {
  if (config.BERTH_RUNTIME !== 'auto') return config.BERTH_RUNTIME;
  if (config.KUBECONFIG || inCluster) return 'kubernetes';
  return config.DATABASE_URL ? 'none' : 'local';
}

/**
 * BERTH_SECRETS_KEY, or — with the embedded database, which lives in the same directory — one
 * generated once into BERTH_DATA_DIR. With DATABASE_URL and no key, no secret can be stored.
 */
async function secretsSealer(config: Config, logger: Logger): Promise<Sealer | undefined> {
  if (config.BERTH_SECRETS_KEY) return sealer(parseSecretsKey(config.BERTH_SECRETS_KEY)!);
  if (config.DATABASE_URL) {
    logger.warn(
      'BERTH_SECRETS_KEY is not set: managed tools with headers (credentials) cannot be registered',
    );
    return undefined;
  }
  const file = path.join(config.BERTH_DATA_DIR, 'secrets-key');
  const existing = (await readFile(file, 'utf8').catch(() => ''))?.trim();
  const key = existing ? parseSecretsKey(existing) : undefined;
  if (key) return sealer(key);
  if (existing)
    throw new Error(
      `${file} does not hold a secrets key (64 hex digits); restore it or set BERTH_SECRETS_KEY`,
    );
  const fresh = newSecretsKey();
  await mkdir(config.BERTH_DATA_DIR, { recursive: true });
  await writeFile(file, fresh + '\n', { mode: 0o600 });
  logger.info({ file }, 'generated a secrets key (set BERTH_SECRETS_KEY to choose one)');
  return sealer(parseSecretsKey(fresh)!);
}

/**
 * Without DATABASE_URL (a laptop, the quick start) the admin token may be left unset: one is
 * generated once into the data directory, so the quick start can read it from there.
 */
async function embeddedAdminToken(dataDir: string, logger: Logger): Promise<string> {
  const file = path.join(dataDir, 'admin-token');
  const existing = await readFile(file, 'utf8').catch(() => undefined);
  if (existing?.trim()) return existing.trim();
  const token = randomBytes(24).toString('hex');
  await mkdir(dataDir, { recursive: true });
  await writeFile(file, token + '\n', { mode: 0o600 });
  logger.info({ file }, 'generated an admin token (set ADMIN_TOKEN to choose one)');
  return token;
}
