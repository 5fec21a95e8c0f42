// The process under test in the proxy benchmark (test/bench/proxy.ts), one per proxy so its CPU time
// and memory are its own: `berth` is the real API (createApp, keys on PostgreSQL) with the in-memory
// endpoint runtime; `bare` is the baseline, a node:http server that pipes to the upstream with undici
// and nothing else. Controlled over the IPC channel: the parent sets the endpoint and its addresses
// and reads CPU time and memory.
//
//   node --import tsx test/bench/proxy-server.ts berth|bare   (spawned with an IPC channel)
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { pipeline } from 'node:stream/promises';
import { request } from 'undici';
import type { Phase, RoutingStrategy } from '@berth/crds';
// The proxy's HTTP client settings, shared with the baseline (this module imports only undici).
import { proxyAgent } from '../../apps/api/src/dedicated/proxy/agent.ts';

export type Command =
  | { type: 'endpoint'; account: string; phase: Phase; routing?: RoutingStrategy }
  | { type: 'addresses'; addresses: string[] }
  | { type: 'inflight' }
  | { type: 'stats' };

export type Reply =
  | { type: 'listening'; port: number }
  | { type: 'ok' }
  | { type: 'flipped'; at: number }
  | { type: 'inflight'; n: number }
  | { type: 'stats'; cpuUs: number; rssBytes: number; heapUsed: number };

const send = (m: Reply) => process.send!(m);
const now = () => performance.timeOrigin + performance.now();

const mode = process.argv[2];

async function startBerth(): Promise<{ server: http.Server; handle(c: Command): void }> {
  // Loaded here, not at the top, so the bare proxy's process holds none of Berth's modules.
  const [
    { openMigratedDatabase },
    { createApp, parseConfig, requestListener },
    { loadCatalog },
    { keyHasher },
    { localRevocationBus },
    { keyService },
    { createLogger },
    { createMetrics },
    { keyRepository },
    { healthRepository },
    { usageRepository },
    { memoryRateLimiter },
    { usageRecorder },
    { platformUpstream },
    { memoryRuntime, BENCH_ENDPOINT_ID },
  ] = await Promise.all([
    import('@berth/db'),
    import('@berth/api'),
    import('@berth/crds'),
    import('../../apps/api/src/accounts/keys/format.ts'),
    import('../../apps/api/src/accounts/keys/revocation-bus.ts'),
    import('../../apps/api/src/accounts/keys/service.ts'),
    import('../../apps/api/src/platform/logger.ts'),
    import('../../apps/api/src/platform/metrics.ts'),
    import('../../apps/api/src/accounts/keys/repository.ts'),
    import('../../apps/api/src/platform/health-repository.ts'),
    import('../../apps/api/src/dedicated/proxy/usage-repository.ts'),
    import('../../apps/api/src/dedicated/proxy/ratelimit.ts'),
    import('../../apps/api/src/dedicated/proxy/usage.ts'),
    import('../../apps/api/src/dedicated/upstream/endpoint-upstream.ts'),
    import('../support/memory-runtime.ts'),
  ]);
  const config = parseConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    DATABASE_URL: process.env.DATABASE_URL,
    ADMIN_TOKEN: process.env.ADMIN_TOKEN,
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'info',
    // Keys' last-used times would be written every 10 s: keep the database out of the measurement.
    KEY_TOUCH_INTERVAL_MS: '3600000',
    ENGINE_LOAD_SAMPLE_MS: process.env.ENGINE_LOAD_SAMPLE_MS,
  });
  const logger = createLogger(config.LOG_LEVEL);
  const db = await openMigratedDatabase({ kind: 'postgres', url: config.DATABASE_URL!, poolSize: 4 });
  const runtime = memoryRuntime();
  const metrics = createMetrics();
  const upstream = platformUpstream({
    endpoints: runtime.endpoints,
    backends: runtime.backends,
    logger,
    engineLoadIntervalMs: config.ENGINE_LOAD_SAMPLE_MS,
    onEngineSample: (outcome) => metrics.engineLoadSamples.inc({ outcome }),
  });
  const keys = keyService({
    repo: keyRepository(db.prisma),
    hash: keyHasher(config.KEY_HASH_SECRET),
    bus: localRevocationBus(),
    metrics: {
      cacheLookup: (result) => metrics.keyCacheCells.add(1, result),
      revocation: (outcome) => metrics.keyRevocations.inc({ outcome }),
    },
    touchIntervalMs: config.KEY_TOUCH_INTERVAL_MS,
  });
  const app = createApp({
    config,
    adminToken: config.ADMIN_TOKEN!,
    keys,
    health: healthRepository(db.prisma),
    metrics,
    logger,
    lifecycle: { shuttingDown: false },
    catalog: loadCatalog(undefined),
    endpoints: {
      runtime,
      upstream,
      dispatcher: proxyAgent(),
      usage: usageRecorder(usageRepository(db.prisma), logger, config.USAGE_FLUSH_INTERVAL_MS),
      limiter: memoryRateLimiter(),
    },
  });
  const server = http.createServer(requestListener(app));
  return {
    server,
    handle(c) {
      if (c.type === 'endpoint') {
        runtime.setEndpoint(c.account, c.phase, c.routing);
        send({ type: 'ok' });
      } else if (c.type === 'addresses') {
        const at = now();
        runtime.setAddresses(c.addresses);
        send({ type: 'flipped', at });
      } else if (c.type === 'inflight') {
        send({ type: 'inflight', n: upstream.inFlight(BENCH_ENDPOINT_ID) });
      }
    },
  };
}

function startBare(): { server: http.Server; handle(c: Command): void } {
  let upstream = '';
  let inflight = 0;
  // Requests that arrive while there is no upstream wait for one (the wake baseline).
  const waiting: (() => void)[] = [];
  const dispatcher = proxyAgent();
  // The same routes' shape: /api/d/<id>/<rest> → <upstream>/v1/<rest>.
  const server = http.createServer(async (req, res) => {
    inflight++;
    res.once('close', () => inflight--);
    try {
      if (!upstream) await new Promise<void>((resolve) => waiting.push(resolve));
      const rest = req.url!.slice(req.url!.indexOf('/', '/api/d/'.length));
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        accept: req.headers.accept ?? '*/*',
      };
      if (req.headers['content-length']) headers['content-length'] = req.headers['content-length'];
      const up = await request(upstream + '/v1' + rest, {
        method: req.method as 'GET' | 'POST',
        headers,
        body: req.method === 'POST' ? req : undefined,
        dispatcher,
        headersTimeout: 0,
        bodyTimeout: 0,
      });
      const type = String(up.headers['content-type'] ?? '');
      const length = up.headers['content-length'];
      res.writeHead(
        up.statusCode,
        typeof length === 'string'
          ? { 'content-type': type, 'content-length': length }
          : { 'content-type': type },
      );
      if (type.startsWith('text/event-stream')) res.flushHeaders();
      await pipeline(up.body, res);
    } catch {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    }
  });
  return {
    server,
    handle(c) {
      if (c.type === 'addresses') {
        const at = now();
        upstream = c.addresses[0] ?? '';
        if (upstream) for (const go of waiting.splice(0)) go();
        send({ type: 'flipped', at });
      } else if (c.type === 'endpoint') send({ type: 'ok' });
      else if (c.type === 'inflight') send({ type: 'inflight', n: inflight });
    },
  };
}

const { server, handle } = mode === 'berth' ? await startBerth() : startBare();
process.on('message', (c: Command) => {
  if (c.type === 'stats') {
    const u = process.cpuUsage();
    const m = process.memoryUsage();
    send({ type: 'stats', cpuUs: u.user + u.system, rssBytes: m.rss, heapUsed: m.heapUsed });
  } else handle(c);
});
process.on('disconnect', () => process.exit(0));
// The same server settings as the API's (server.ts).
server.requestTimeout = 0;
server.headersTimeout = 60_000;
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => {
  send({ type: 'listening', port: (server.address() as AddressInfo).port });
});
