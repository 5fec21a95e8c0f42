// Composition root: configuration in, a listening API out. main.ts and the tests both use it.
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { openMigratedDatabase } from '@berth/db';
import { createApp } from './app.ts';
import type { Config } from './config.ts';
import { keyHasher } from './keys/format.ts';
import { localRevocationBus, postgresRevocationBus, type RevocationBus } from './keys/revocation-bus.ts';
import { keyService, type KeyService } from './keys/service.ts';
import { createLogger, type Logger } from './logger.ts';
import { createMetrics } from './metrics.ts';
import { healthRepository, keyRepository } from './repositories/keys.ts';
import { usageRepository } from './repositories/usage.ts';
import { loadCatalog } from '@berth/crds';
import { existsSync } from 'node:fs';
import { kubernetesRuntime, localRuntime, type EndpointRuntime } from './endpoints/index.ts';
import { proxyAgent } from './proxy/agent.ts';
import { memoryRateLimiter, redisRateLimiter, type RateLimiter } from './proxy/ratelimit.ts';
import { usageRecorder, type UsageRecorder } from './proxy/usage.ts';
import { platformUpstream, type PlatformUpstream } from './upstream/platform.ts';
import type { Agent } from 'undici';
import type { Lifecycle } from './routes/health.ts';
import { startBilling, type Billing } from './billing/index.ts';
import { startElastic, type Elastic } from './elastic/index.ts';

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

export async function startApi(config: Config, options: { logger?: Logger } = {}): Promise<RunningApi> {
  const logger = options.logger ?? createLogger(config.LOG_LEVEL);
  const db = await openMigratedDatabase(
    config.DATABASE_URL
      ? { kind: 'postgres', url: config.DATABASE_URL, poolSize: config.DB_POOL_SIZE }
      : { kind: 'embedded', dataDir: path.join(config.BERTH_DATA_DIR, 'db') },
  );
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
  let elastic: Elastic | undefined;
  try {
    const catalog = loadCatalog(config.BERTH_CATALOG_FILE);
    const inCluster =
      !!process.env.KUBERNETES_SERVICE_HOST &&
      existsSync('/var/run/secrets/kubernetes.io/serviceaccount/token');
    const kind = runtimeKind(config, inCluster);
    if (kind === 'kubernetes') {
      runtime = kubernetesRuntime(config, logger);
    } else if (kind === 'local') {
      runtime = await localRuntime({ config, logger, prisma: db.prisma, catalog });
    } else {
      logger.warn(
        'no Kubernetes configured (KUBECONFIG unset) and DATABASE_URL set: dedicated endpoints are disabled (BERTH_RUNTIME=local runs them as processes of this API, one API process only)',
      );
    }
    if (runtime) {
      usage = usageRecorder(usageRepository(db.prisma), logger, config.USAGE_FLUSH_INTERVAL_MS);
      limiter = config.REDIS_URL ? await redisRateLimiter(config.REDIS_URL, logger) : memoryRateLimiter();
      await runtime.ready();
      upstream = platformUpstream({ endpoints: runtime.endpoints, backends: runtime.backends, logger });
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
    const metrics = createMetrics();
    billing = await startBilling({ config, db, catalog, logger, registry: metrics.registry });
    elastic = await startElastic({
      config,
      db,
      logger,
      wallet: billing.wallet,
      dispatcher,
      ...(runtime && upstream ? { platform: { endpoints: runtime.endpoints, upstream } } : {}),
    });
    keys = keyService({
      repo: keyRepository(db.prisma),
      hash: keyHasher(config.KEY_HASH_SECRET),
      bus,
      metrics: {
        cacheLookup: (result) => metrics.keyCache.inc({ result }),
        revocation: (outcome) => metrics.keyRevocations.inc({ outcome }),
      },
      touchIntervalMs: config.KEY_TOUCH_INTERVAL_MS,
    });
    const lifecycle: Lifecycle = { shuttingDown: false };
    const app = createApp({
      config,
      adminToken,
      keys,
      health: healthRepository(db.prisma),
      metrics,
      logger,
      lifecycle,
      catalog,
      endpoints:
        runtime && upstream && dispatcher && usage && limiter
          ? { runtime, upstream, dispatcher, usage, limiter }
          : undefined,
      billing,
      elastic,
    });

    const server = app.listen(config.PORT, config.HOST);
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
    // Streams may run for the whole wall-clock limit; Node's defaults would cut them.
    server.requestTimeout = 0;
    server.headersTimeout = 60_000;
    server.keepAliveTimeout = 65_000;
    const { port } = server.address() as AddressInfo;
    const host = config.HOST === '0.0.0.0' || config.HOST === '::' ? '127.0.0.1' : config.HOST;
    logger.info({ port, host: config.HOST }, 'Berth API listening');
    logger.flush();

    const k = keys;
    const b = bus;
    const rt = runtime;
    const u = usage;
    const l = limiter;
    const up = upstream;
    const d = dispatcher;
    const bill = billing;
    const el = elastic;
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
          const grace = setTimeout(() => server.closeAllConnections(), config.SHUTDOWN_GRACE_MS);
          await drained;
          clearTimeout(grace);
          await up?.close();
          await rt?.close();
          await d?.close();
          await u?.close();
          await l?.close();
          await el.close();
          await bill.close();
          await k.close();
          await b.close();
          await db.close();
          logger.info('Berth API stopped');
          logger.flush();
        })()),
    };
  } catch (err) {
    await upstream?.close();
    await runtime?.close();
    await dispatcher?.close();
    await usage?.close();
    await limiter?.close();
    await elastic?.close();
    await billing?.close();
    await keys?.close();
    await bus?.close();
    await db.close();
    throw err;
  }
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
