// The HTTP side of the simulator: vLLM's routes on node:http, start-up ("model loading") and a
// draining shutdown. Requests are validated in requests.ts and run by the engine (engine.ts).

import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import {
  checkRuntimePatch,
  ConfigError,
  runtimeSnapshot,
  type EngineSimOptions,
  type RuntimeKnobs,
} from './config.ts';
import { Engine } from './engine.ts';
import {
  badRequest,
  cudaOomMessage,
  gatedRepoMessage,
  notReady,
  shuttingDown,
  validationError,
  vllmLogLine,
} from './errors.ts';
import { methodNotAllowed, notFound, readBody, sendError, sendJson } from './http.ts';
import type { EngineMetrics } from './metrics.ts';
import { parseEmbeddings, parseGeneration, parseResponses, planFor } from './requests.ts';
import { startUp, type StartEnv } from './startup.ts';

const ROUTES = [
  '/health',
  '/metrics',
  '/version',
  '/v1/models',
  '/v1/chat/completions',
  '/v1/completions',
  '/v1/responses',
  '/v1/embeddings',
];

export const SIM_VERSION = '0.11.0+engine-sim';

export class StartupError extends Error {
  readonly kind: 'oom' | 'gated';
  /** What vLLM would print to stderr. */
  readonly stderr: string;

  constructor(kind: 'oom' | 'gated', stderr: string) {
    super(kind === 'oom' ? 'CUDA out of memory' : 'Cannot access gated repo');
    this.kind = kind;
    this.stderr = stderr;
  }
}

export interface EngineSimHandle {
  url: string;
  host: string;
  port: number;
  /** Resolves when the model is "loaded" (/health turns 200); rejects with StartupError on a start-up failure. */
  ready: Promise<void>;
  isReady(): boolean;
  metrics: EngineMetrics;
  /**
   * Changes runtime knobs on the running simulator (as PATCH /sim/config does) and returns them all;
   * throws ConfigError naming the knob on a bad value. `configure({})` just reads them.
   */
  configure(patch: Partial<RuntimeKnobs>): RuntimeKnobs;
  /** Empties the prefix cache (as POST /reset_prefix_cache does). */
  resetPrefixCache(): void;
  /**
   * The W3C `traceparent` of the last generation and embedding requests that carried one (the parent
   * vLLM's `llm_request` span takes with --otlp-traces-endpoint), oldest first, the last 100.
   */
  readonly traceparents: readonly string[];
  /** Stop accepting, let in-flight requests finish within the grace period, then cut the rest. */
  close(graceMs?: number): Promise<void>;
}

export interface ServeOptions {
  /** vLLM-style log lines (default: none). */
  log?: (line: string) => void;
  /** Hugging Face token the "download" sees; defaults to HF_TOKEN / HUGGING_FACE_HUB_TOKEN. */
  hfToken?: string | undefined;
  /**
   * The environment the start-up reads its caches and hub from (HF_HOME, HF_ENDPOINT, HF_TOKEN,
   * VLLM_CACHE_ROOT); defaults to the process's. Several simulators in one process standing for pods
   * on different nodes each see their own node's cache this way.
   */
  env?: StartEnv;
}

export async function serve(o: EngineSimOptions, serveOptions: ServeOptions = {}): Promise<EngineSimHandle> {
  const log = serveOptions.log ?? (() => {});
  const served = new Set(o.servedModelNames);
  const engine = new Engine(o);
  const startedAt = Math.floor(Date.now() / 1000);

  let loaded = false;
  let draining = false;
  const traceparents: string[] = [];

  const modelsBody = () =>
    JSON.stringify({
      object: 'list',
      data: o.servedModelNames.map((name) => ({
        id: name,
        object: 'model',
        created: startedAt,
        owned_by: 'vllm',
        root: o.model,
        parent: null,
        max_model_len: o.maxModelLen,
        permission: [
          {
            id: `modelperm-${randomUUID().replaceAll('-', '')}`,
            object: 'model_permission',
            created: startedAt,
            allow_create_engine: false,
            allow_sampling: true,
            allow_logprobs: true,
            allow_search_indices: false,
            allow_view: true,
            allow_fine_tuning: false,
            organization: '*',
            group: null,
            is_blocking: false,
          },
        ],
      })),
    });

  function route(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const method = req.method ?? 'GET';

    if (draining && path !== '/metrics') {
      // A request on a kept-alive connection after SIGTERM: refuse and close the connection.
      if (path === '/health') {
        res.writeHead(503, { 'content-length': 0, connection: 'close' });
        return void res.end();
      }
      return sendError(res, shuttingDown(), { connection: 'close' });
    }

    switch (path) {
      case '/health':
        if (method !== 'GET') return methodNotAllowed(res);
        res.writeHead(loaded ? 200 : 503, { 'content-length': 0 });
        return void res.end();
      case '/metrics':
        if (method !== 'GET') return methodNotAllowed(res);
        {
          const text = engine.metrics.render();
          res.writeHead(200, {
            'content-type': 'text/plain; version=0.0.4; charset=utf-8',
            'content-length': Buffer.byteLength(text),
          });
          return void res.end(text);
        }
      case '/version':
        return sendJson(res, 200, JSON.stringify({ version: SIM_VERSION }));
      case '/v1/models':
        if (method !== 'GET') return methodNotAllowed(res);
        if (!loaded) return sendError(res, notReady());
        return sendJson(res, 200, modelsBody());
      case '/v1/chat/completions':
      case '/v1/completions':
      case '/v1/responses':
      case '/v1/embeddings': {
        if (method !== 'POST') return methodNotAllowed(res);
        if (!loaded) return sendError(res, notReady());
        if (typeof req.headers.traceparent === 'string') {
          traceparents.push(req.headers.traceparent);
          if (traceparents.length > 100) traceparents.shift();
        }
        return readBody(req, res, (raw) => {
          const arrivedAt = performance.now();
          if (!engine.admit(res)) return;
          if (path === '/v1/embeddings') {
            const parsed = parseEmbeddings(raw, o, served);
            if (!parsed.ok) return sendError(res, parsed.error);
            return engine.embed(parsed.value, planFor(req, o), res, arrivedAt);
          }
          const parsed =
            path === '/v1/responses'
              ? parseResponses(raw, o, served)
              : parseGeneration(path === '/v1/chat/completions' ? 'chat' : 'completion', raw, o, served);
          if (!parsed.ok) return sendError(res, parsed.error);
          engine.generate(parsed.value, planFor(req, o), res, arrivedAt);
        });
      }
      case '/sim/config':
        if (!o.simAdmin) return notFound(res);
        if (method === 'GET') return sendJson(res, 200, JSON.stringify(runtimeSnapshot(o)));
        if (method !== 'PATCH') return methodNotAllowed(res);
        return readBody(req, res, (raw) => {
          let patch: unknown;
          try {
            patch = JSON.parse(raw.toString('utf8'));
          } catch (err) {
            return sendError(res, validationError(`invalid JSON: ${(err as Error).message}`));
          }
          const checked = checkRuntimePatch(o, patch);
          if (!checked.ok) return sendError(res, badRequest(checked.message, checked.key));
          Object.assign(o, checked.value);
          sendJson(res, 200, JSON.stringify(runtimeSnapshot(o)));
        });
      case '/reset_prefix_cache':
        if (!o.simAdmin) return notFound(res);
        if (method !== 'POST') return methodNotAllowed(res);
        engine.prefixCache.reset();
        res.writeHead(200, { 'content-length': 0 });
        return void res.end();
      default:
        return notFound(res);
    }
  }

  function configure(patch: Partial<RuntimeKnobs>): RuntimeKnobs {
    const checked = checkRuntimePatch(o, patch);
    if (!checked.ok) throw new ConfigError(checked.message);
    Object.assign(o, checked.value);
    return runtimeSnapshot(o);
  }

  const server = http.createServer({ keepAliveTimeout: 5000 }, route);
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
    else socket.destroy();
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    // uvicorn's default backlog; Node's 511 drops SYNs when a benchmark opens 1,000+ connections at once.
    server.listen({ host: o.host, port: o.port, backlog: 2048 }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const urlHost = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const displayHost = addr.address === '0.0.0.0' || addr.address === '::' ? '127.0.0.1' : urlHost;
  const url = `http://${displayHost}:${addr.port}`;
  log(vllmLogLine('INFO', 'api_server.py:1880', `vLLM API server version ${SIM_VERSION}`));
  log(
    vllmLogLine(
      'INFO',
      'utils.py:326',
      `non-default args: {'model': '${o.model}', 'served_model_name': ${JSON.stringify(o.servedModelNames)}, 'max_model_len': ${o.maxModelLen}}`,
    ),
  );
  log(
    vllmLogLine('INFO', 'api_server.py:1951', `Starting vLLM API server 0 on http://${urlHost}:${addr.port}`),
  );

  // Weights (cached on the node, or downloaded once per node), compile (cached or not), loading:
  // ./startup.ts. Then the start-up failures vLLM reports at that point.
  const starting = new AbortController();
  const env = serveOptions.env ?? process.env;
  const ready = startUp(o, log, starting.signal, env).then(() => {
    const hfToken =
      'hfToken' in serveOptions ? serveOptions.hfToken : (env.HF_TOKEN ?? env.HUGGING_FACE_HUB_TOKEN);
    let failure: StartupError | null = null;
    if (o.failStartup === 'oom') failure = new StartupError('oom', cudaOomMessage());
    else if (o.failStartup === 'gated' || (o.requireHfToken !== null && hfToken !== o.requireHfToken))
      failure = new StartupError('gated', gatedRepoMessage(o.model));
    if (failure) {
      server.close();
      server.closeAllConnections();
      throw failure;
    }
    loaded = true;
    log(vllmLogLine('INFO', 'launcher.py:29', `Available routes are: ${ROUTES.join(', ')}`));
    log('INFO:     Application startup complete.\n');
  });
  ready.catch(() => {}); // callers that never await `ready` must not see an unhandled rejection

  let closing: Promise<void> | null = null;
  function close(graceMs = o.shutdownGraceMs): Promise<void> {
    if (closing) return closing;
    draining = true;
    starting.abort();
    closing = (async () => {
      const closed = new Promise<void>((r) => server.close(() => r()));
      server.closeIdleConnections();
      await engine.drain(graceMs);
      server.closeAllConnections();
      await closed;
    })();
    return closing;
  }

  return {
    url,
    host: addr.address,
    port: addr.port,
    ready,
    isReady: () => loaded,
    metrics: engine.metrics,
    configure,
    resetPrefixCache: () => engine.prefixCache.reset(),
    traceparents,
    close,
  };
}
