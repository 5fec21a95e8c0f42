// The dedicated proxy's tests' harness: the real Express app (createApp) on a fresh PostgreSQL
// database, real keys, with only Kubernetes replaced by the in-memory endpoint runtime
// (./memory-runtime.ts), one account owning the endpoint `BENCH_ENDPOINT_ID` and an inference key.
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEFAULT_CATALOG } from '@berth/crds';
import { openMigratedDatabase } from '@berth/db';
import { pino } from 'pino';
import { createApp } from '../../apps/api/src/app.ts';
import { keyHasher } from '../../apps/api/src/accounts/keys/format.ts';
import { keyRepository } from '../../apps/api/src/accounts/keys/repository.ts';
import { localRevocationBus } from '../../apps/api/src/accounts/keys/revocation-bus.ts';
import { keyService, type KeyService } from '../../apps/api/src/accounts/keys/service.ts';
import { proxyAgent } from '../../apps/api/src/dedicated/proxy/agent.ts';
import { memoryRateLimiter } from '../../apps/api/src/dedicated/proxy/ratelimit.ts';
import { usageRepository } from '../../apps/api/src/dedicated/proxy/usage-repository.ts';
import { usageRecorder, type UsageRecorder } from '../../apps/api/src/dedicated/proxy/usage.ts';
import {
  platformUpstream,
  type PlatformUpstream,
} from '../../apps/api/src/dedicated/upstream/endpoint-upstream.ts';
import { parseConfig } from '../../apps/api/src/platform/config.ts';
import { healthRepository } from '../../apps/api/src/platform/health-repository.ts';
import { createMetrics } from '../../apps/api/src/platform/metrics.ts';
import { BENCH_ENDPOINT_ID, memoryRuntime, type MemoryRuntime } from './memory-runtime.ts';
import { createTestDatabase, type TestDatabase } from './postgres.ts';

export interface MemoryProxy {
  db: TestDatabase;
  keys: KeyService;
  runtime: MemoryRuntime;
  upstream: PlatformUpstream;
  usage: UsageRecorder;
  server: Server;
  /** `http://127.0.0.1:<port>/api/d/<BENCH_ENDPOINT_ID>` */
  base: string;
  account: { id: string };
  /** An inference key of the account. */
  key: string;
  close(): Promise<void>;
}

/**
 * Starts the app with `env` over MAX_BODY_BYTES=1 MiB and PROXY_RETRIES=0; the endpoint is in
 * `phase` (default up) with `engines` as its Ready replicas.
 */
export async function startMemoryProxy(o: {
  name: string;
  env?: Record<string, string>;
  engines?: string[];
  phase?: 'up' | 'hibernated';
}): Promise<MemoryProxy> {
  const logger = pino({ level: 'silent' });
  const db = await createTestDatabase(o.name);
  const database = await openMigratedDatabase({ kind: 'postgres', url: db.url });
  const keys = keyService({
    repo: keyRepository(database.prisma),
    hash: keyHasher(),
    bus: localRevocationBus(),
    touchIntervalMs: 60_000,
  });
  const runtime = memoryRuntime();
  const upstream = platformUpstream({ endpoints: runtime.endpoints, backends: runtime.backends, logger });
  const usage = usageRecorder(usageRepository(database.prisma), logger, 60_000);
  const dispatcher = proxyAgent();
  const app = createApp({
    config: parseConfig({ MAX_BODY_BYTES: String(1 << 20), PROXY_RETRIES: '0', ...o.env }),
    adminToken: 'x'.repeat(20),
    keys,
    health: healthRepository(database.prisma),
    metrics: createMetrics(),
    logger,
    lifecycle: { shuttingDown: false },
    catalog: DEFAULT_CATALOG,
    endpoints: { runtime, upstream, dispatcher, usage, limiter: memoryRateLimiter() },
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const { account } = await keys.createAccount(o.name);
  runtime.setEndpoint(account.id, o.phase ?? 'up');
  runtime.setAddresses(o.engines ?? []);
  const key = (await keys.createKey({ accountId: account.id, name: 'k', scope: 'inference' })).value;
  return {
    db,
    keys,
    runtime,
    upstream,
    usage,
    server,
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/d/${BENCH_ENDPOINT_ID}`,
    account,
    key,
    async close() {
      server.closeAllConnections();
      server.close();
      await usage.close();
      await upstream.close();
      await dispatcher.close();
      await keys.close();
      await database.close();
      await db.drop();
    },
  };
}
