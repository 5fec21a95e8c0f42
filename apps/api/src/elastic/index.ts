// Elastic inference, assembled: the catalog (memory, elastic_models, NOTIFY between replicas, the
// declarative file) and the call path. server.ts starts it once.
import type { DedicatedEndpoint } from '@berth/crds';
import type { Database } from '@berth/db';
import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import type { Wallet } from '../billing/wallet.ts';
import type { Config } from '../platform/config.ts';
import type { EndpointCache } from '../dedicated/ports.ts';
import type { Upstream } from '../dedicated/upstream/types.ts';
import { applyModelsFile, catalogNotifications, elasticCatalog, type ElasticCatalog } from './catalog.ts';
import { elasticCaller, type ElasticCaller } from './call.ts';
import { catalogRepository } from './repository.ts';
import type { Sealer } from '../platform/sealed.ts';

export interface Elastic {
  catalog: ElasticCatalog;
  caller: ElasticCaller;
  close(): Promise<void>;
}

export async function startElastic(deps: {
  config: Pick<
    Config,
    'DATABASE_URL' | 'BERTH_MODELS_FILE' | 'ELASTIC_COOLDOWN_MS' | 'WAKE_HOLD_TIMEOUT_MS' | 'PROXY_RETRIES'
  >;
  db: Database;
  logger: Logger;
  wallet: Wallet;
  dispatcher: Dispatcher;
  /** Seals external backends' API keys at rest (BERTH_SECRETS_KEY); absent: such backends are refused. */
  sealer?: Sealer;
  platform?: { endpoints: EndpointCache; upstream: Upstream<DedicatedEndpoint> };
}): Promise<Elastic> {
  const { config } = deps;
  const logger = deps.logger.child({ component: 'elastic' });
  let reload: () => void = () => {};
  const bus = config.DATABASE_URL
    ? await catalogNotifications(config.DATABASE_URL, logger, () => reload())
    : undefined;
  try {
    const platform = deps.platform;
    const catalog = await elasticCatalog({
      repo: catalogRepository(deps.db.prisma),
      logger,
      ...(deps.sealer ? { sealer: deps.sealer } : {}),
      ...(platform ? { endpointExists: (id: string) => platform.endpoints.get(id) !== undefined } : {}),
      ...(bus ? { notify: () => bus.notify() } : {}),
    });
    reload = () =>
      void catalog
        .reload()
        .catch((err: unknown) => logger.warn({ err: (err as Error).message }, 'catalog reload failed'));
    if (config.BERTH_MODELS_FILE) {
      const n = await applyModelsFile(catalog, config.BERTH_MODELS_FILE);
      logger.info({ file: config.BERTH_MODELS_FILE, models: n }, 'applied the catalog file');
    }
    const caller = elasticCaller({
      catalog,
      wallet: deps.wallet,
      dispatcher: deps.dispatcher,
      ...(platform ? { platform } : {}),
      config: {
        wakeHoldMs: config.WAKE_HOLD_TIMEOUT_MS,
        retries: config.PROXY_RETRIES,
        cooldownMs: config.ELASTIC_COOLDOWN_MS,
      },
    });
    return {
      catalog,
      caller,
      async close() {
        await bus?.close();
      },
    };
  } catch (err) {
    await bus?.close();
    throw err;
  }
}
