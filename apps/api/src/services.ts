// The products' services, started in order from the parsed configuration, each pushing its closer on
// the one stack (platform/closers.ts): what createApp serves. server.ts calls it once the port is bound
// and the database open.
import { loadCatalog } from '@berth/crds';
import { loadMigrations, type Database } from '@berth/db';
import type { Closers } from './platform/closers.ts';
import type { Config } from './platform/config.ts';
import { databaseUnavailable } from './platform/db-unavailable.ts';
import { embeddedAdminToken, secretsSealer } from './platform/generated-secrets.ts';
import { healthRepository } from './platform/health-repository.ts';
import type { Logger } from './platform/logger.ts';
import { createMetrics, type ApiMetrics } from './platform/metrics.ts';
import type { Lifecycle } from './http/health.ts';
import { keyHasher } from './accounts/keys/format.ts';
import { keyRepository } from './accounts/keys/repository.ts';
import { localRevocationBus, postgresRevocationBus } from './accounts/keys/revocation-bus.ts';
import { keyService, type KeyService } from './accounts/keys/service.ts';
import type { PinnedModelCheck } from './accounts/keys/lifecycle.ts';
import { accountRepository, databaseAccountLock } from './accounts/repository.ts';
import { dashboardAuth } from './accounts/sign-in/dashboard-auth.ts';
import { sessionRepository } from './accounts/sign-in/session-repository.ts';
import { startBilling, type Billing } from './billing/index.ts';
import { proxyAgent } from './dedicated/proxy/agent.ts';
import { startDedicated, type Dedicated } from './dedicated/start.ts';
import { startElastic } from './elastic/index.ts';
import { pinnedModelProblem } from './elastic/pinnable.ts';
import { toolRepository } from './tools/repository.ts';
import { olympusRepository } from './olympus/repository.ts';
import { routeMatcher } from './olympus/routing.ts';
import { startChronos, type ChronosClock } from './chronos/index.ts';
import { chronosQueueRepository } from './chronos/queue-repository.ts';
import { chronosRepository } from './chronos/repository.ts';
import type { AppDeps } from './app.ts';

export interface Services {
  /** What createApp serves. */
  app: AppDeps;
  keys: KeyService;
  billing: Billing;
  /** Dedicated endpoints, when a runtime is configured. */
  dedicated?: Dedicated;
}

export async function startServices(deps: {
  config: Config;
  db: Database;
  /** Where dedicated endpoints run (dedicated/runtimes.ts runtimeKind). */
  kind: 'kubernetes' | 'local' | 'none';
  logger: Logger;
  /** The clock of GPU metering and invoices (tests move it). */
  now?: () => Date;
  /** The clock Chronos's schedules run on (tests run it faster). */
  chronosClock?: ChronosClock;
  closers: Closers;
}): Promise<Services> {
  const { config, db, kind, logger, closers } = deps;
  const catalog = loadCatalog(config.BERTH_CATALOG_FILE);
  const metrics = createMetrics();
  const now = deps.now ?? (() => new Date());
  const billing = await startBilling({
    config,
    db,
    catalog,
    logger,
    registry: metrics.registry,
    ...(deps.now ? { now: deps.now } : {}),
  });
  closers.push(() => billing.close());
  // The proxy's one HTTP client: dedicated endpoints and Elastic's backends.
  const dispatcher = proxyAgent();
  closers.push(() => dispatcher.close());
  const dedicated =
    kind === 'none'
      ? undefined
      : await startDedicated({ config, kind, db, catalog, gpu: billing.gpu, metrics, logger, now, closers });
  if (kind === 'none')
    logger.warn(
      'no Kubernetes configured (KUBECONFIG unset) and DATABASE_URL set: dedicated endpoints are disabled (BERTH_RUNTIME=local runs them as processes of this API, one API process only)',
    );
  const adminToken = config.ADMIN_TOKEN ?? (await embeddedAdminToken(config.BERTH_DATA_DIR, logger));
  const secrets = await secretsSealer(config, logger);
  const platform = dedicated
    ? { endpoints: dedicated.runtime.endpoints, upstream: dedicated.upstream }
    : undefined;
  const elastic = await startElastic({
    config,
    db,
    logger,
    wallet: billing.wallet,
    dispatcher,
    ...(secrets ? { sealer: secrets } : {}),
    ...(platform ? { platform } : {}),
  });
  closers.push(() => elastic.close());
  const keys = await startKeys(config, db, metrics, logger, closers, (accountId, model) =>
    pinnedModelProblem(
      { catalog: elastic.catalog, ...(platform ? { endpoints: platform.endpoints } : {}) },
      accountId,
      model,
    ),
  );
  // A key's spend limit changed or it was revoked, on any replica: billing reads it again.
  keys.onChanged((keyId) => billing.wallet.keyChanged(keyId));
  const tools = toolRepository(db.prisma);
  const olympus = olympusRepository(db.prisma);
  // One matcher (and its cache of example embeddings) for the front door, the dry run and
  // Chronos's `auto` steps: they choose with the same routes.
  const olympusRoutes = routeMatcher({
    catalog: elastic.catalog,
    caller: elastic.caller,
    timeoutMs: config.OLYMPUS_ROUTE_TIMEOUT_MS,
    logger,
    count: (outcome) => metrics.olympusRoutes.inc({ outcome }),
  });
  const chronos = await startChronos({
    jobs: billing.jobs,
    repo: chronosRepository(db.prisma),
    queue: chronosQueueRepository(db.prisma),
    wakeups: db.pglite ? { pglite: db.pglite } : { url: config.DATABASE_URL! },
    steps: {
      wallet: billing.wallet,
      catalog: elastic.catalog,
      caller: elastic.caller,
      tools,
      olympus,
      routes: olympusRoutes,
      logger,
      maxToolResponseBytes: config.MANAGED_TOOL_MAX_RESPONSE_BYTES,
      ...(secrets ? { sealer: secrets } : {}),
    },
    config: {
      enabled: config.CHRONOS_ENABLED,
      fee: config.CHRONOS_RUN_FEE,
      stepTimeoutMs: config.CHRONOS_STEP_TIMEOUT_MS,
      concurrency: config.CHRONOS_CONCURRENCY,
      prewarmSeconds: config.CHRONOS_PREWARM_SECONDS,
      runsQuota: config.BERTH_QUOTA_CHRONOS_RUNS,
    },
    logger,
    registry: metrics.registry,
    ...(platform ? { platform } : {}),
    ...(deps.chronosClock ? { clock: deps.chronosClock } : {}),
  });
  closers.push(() => chronos.close());
  const auth = dashboardAuth({ config, sessions: sessionRepository(db.prisma), adminToken, logger });
  closers.push(() => auth.close());
  const lifecycle: Lifecycle = { shuttingDown: false };
  const app: AppDeps = {
    config,
    adminToken,
    keys,
    health: healthRepository(db.prisma, (await loadMigrations()).migrationDirectories.at(-1)?.path),
    accounts: accountRepository(db.prisma),
    metrics,
    logger,
    lifecycle,
    catalog,
    ...(dedicated
      ? {
          endpoints: {
            runtime: dedicated.runtime,
            upstream: dedicated.upstream,
            dispatcher,
            usage: dedicated.usage,
            limiter: dedicated.limiter,
            metrics: dedicated.metrics,
            // On Kubernetes several API replicas may write one account's endpoints: the lock is
            // the database's. Local endpoints have one process, and its lock is enough.
            ...(kind === 'kubernetes' && db.kind !== 'embedded'
              ? { accountLock: databaseAccountLock(db.prisma) }
              : {}),
          },
        }
      : {}),
    billing,
    auth,
    tools: { tools, ...(secrets ? { sealer: secrets } : {}) },
    elastic,
    olympus: { policies: olympus, routes: olympusRoutes },
    chronos,
  };
  return { app, keys, billing, ...(dedicated ? { dedicated } : {}) };
}

/** API keys: the revocation bus between replicas, and the key service (each closer pushed). */
async function startKeys(
  config: Config,
  db: Database,
  metrics: ApiMetrics,
  logger: Logger,
  closers: Closers,
  pinnedModel: PinnedModelCheck,
): Promise<KeyService> {
  const bus = config.DATABASE_URL
    ? await postgresRevocationBus({
        url: config.DATABASE_URL,
        ackTimeoutMs: config.REVOCATION_ACK_TIMEOUT_MS,
        logger,
      })
    : localRevocationBus();
  closers.push(() => bus.close());
  const keys = keyService({
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
    pinnedModel,
  });
  closers.push(() => keys.close());
  return keys;
}
