// Local mode: dedicated endpoints with no cluster. Endpoints are rows in the API's database served
// from an in-process cache, each replica is a process on this machine, and the operator's reconciler
// core (phase machine, reconcile pass, work queue) drives them exactly as it drives Deployments on
// Kubernetes. The API's routes, proxy, wake-on-request, activity and logs use the same interfaces
// as with the Kubernetes runtime.
import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import { cliPath } from '@berth/engine-sim';
import type { Catalog } from '@berth/crds';
import type { PrismaClient } from '@berth/db';
import { reconcileKey, WorkQueue, type ReconcileDeps } from '@berth/operator';
import type { Logger } from 'pino';
import { Agent } from 'undici';
import type { Config } from '../../config.ts';
import { ConfigError } from '../../config.ts';
import { activityReporter } from '../activity.ts';
import type { Backends } from '../store.ts';
import { waker } from '../wake.ts';
import { localEndpointLogs, logFiles } from './logfiles.ts';
import { processDriver, type EngineCommand } from './processes.ts';
import { localEndpointRepository } from './repository.ts';
import { keyOf, localEndpointStore } from './store.ts';

export interface LocalRuntimeOptions {
  config: Config;
  logger: Logger;
  prisma: PrismaClient;
  catalog: Catalog;
  env?: NodeJS.ProcessEnv;
}

/** The command that runs one replica: the engine simulator (default) or vLLM from PATH. */
export function engineCommand(engine: 'sim' | 'vllm', env: NodeJS.ProcessEnv = process.env): EngineCommand {
  if (engine === 'sim') return { command: process.execPath, prefix: [cliPath] };
  const vllm = which('vllm', env.PATH ?? '');
  if (!vllm)
    throw new ConfigError(
      'Invalid configuration:\n  - BERTH_LOCAL_ENGINE: is "vllm" but no `vllm` executable is on PATH (install vLLM, e.g. `pip install vllm`, or unset BERTH_LOCAL_ENGINE to run the engine simulator)',
    );
  return { command: vllm, prefix: ['serve'] };
}

function which(name: string, pathVar: string): string | undefined {
  for (const dir of pathVar.split(path.delimiter).filter(Boolean)) {
    const candidate = path.join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

export async function localRuntime(o: LocalRuntimeOptions) {
  const { config, logger } = o;
  const log = logger.child({ runtime: 'local' });
  const engine = engineCommand(config.BERTH_LOCAL_ENGINE, o.env);
  const files = logFiles(path.join(config.BERTH_DATA_DIR, 'logs'), config.BERTH_LOCAL_LOG_MAX_BYTES);

  let enqueue: (key: string) => void = () => {};
  const driver = processDriver({
    engine,
    extraArgs: config.BERTH_LOCAL_ENGINE_ARGS,
    runDir: path.join(config.BERTH_DATA_DIR, 'run'),
    logs: files,
    log,
    crashLoopRestarts: config.BERTH_CRASHLOOP_RESTARTS,
    stopGraceMs: config.BERTH_LOCAL_STOP_GRACE_MS,
    ...(o.env ? { env: o.env } : {}),
    onChange: (id) => enqueue(keyOf(id)),
  });
  const store = await localEndpointStore(localEndpointRepository(o.prisma), {
    onChange: (key) => enqueue(key),
    recordEvent: (ep, ev) => files.note(ep.metadata.name, `event ${ev.type} ${ev.reason}: ${ev.message}`),
  });

  const deps: ReconcileDeps = {
    store: store.reconciler,
    driver,
    termination: {
      // Terminate: stop the processes (the Kubernetes garbage collector's part) and drop the logs.
      onTerminate: async (ep) => {
        await driver.remove(ep.metadata.name);
        files.remove(ep.metadata.name);
      },
    },
    catalog: o.catalog,
    phase: {
      deadlines: {
        provisioningSeconds: config.BERTH_PROVISIONING_TIMEOUT_SECONDS,
        wakeSeconds: config.BERTH_WAKE_TIMEOUT_SECONDS,
      },
      scaling: { targetInFlightPerReplica: 16 },
    },
    // No hub to ask unless one is configured: a laptop may be offline, and vLLM reports a missing
    // or gated model itself when it starts (classified from its output).
    ...(config.HF_ENDPOINT
      ? { preflight: { hfEndpoint: config.HF_ENDPOINT, gpuMemoryUtilization: 0.9, timeoutMs: 10_000 } }
      : {}),
    log,
  };
  const queue = new WorkQueue(
    async (key) => {
      const result = await reconcileKey(key, deps);
      // Gone from the store (deleted before it ever had a finalizer): make sure nothing runs.
      const id = key.slice(key.indexOf('/') + 1);
      if (!store.get(id)) await driver.remove(id);
      return result;
    },
    {
      concurrency: 4,
      baseDelayMs: 500,
      maxDelayMs: 30_000,
      onOutcome: (key, outcome, err) => {
        if (outcome === 'error' || outcome === 'terminal')
          log.warn({ endpoint: key, outcome, err: (err as Error)?.message }, 'reconcile failed');
      },
    },
  );
  enqueue = (key) => queue.add(key);
  const resync = setInterval(() => store.keys().forEach((k) => queue.add(k)), 60_000);
  resync.unref();
  // After a restart nothing runs: endpoints that were up go through `building` again and start
  // their processes; hibernated ones stay asleep until a request; failed ones stay failed.
  for (const k of store.keys()) queue.add(k);
  log.info(
    { endpoints: store.keys().length, engine: config.BERTH_LOCAL_ENGINE, dataDir: config.BERTH_DATA_DIR },
    'local runtime: endpoints run as processes on this machine',
  );

  const backends: Backends = {
    ready: () => Promise.resolve(),
    addresses: (id) => driver.addresses(id),
    watch: (id, fn) => driver.watchAddresses(id, fn),
    close: async () => {},
  };
  const activity = activityReporter(store, logger);
  const dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: null, pipelining: 1 });
  return {
    kind: 'local' as const,
    store,
    backends,
    waker: waker(store, backends, logger),
    activity,
    logs: localEndpointLogs(files),
    dispatcher,
    ready: () => Promise.resolve(),
    async close() {
      clearInterval(resync);
      await activity.close();
      await queue.shutdown();
      // Engines drain their requests in flight (SIGTERM) before the API's database closes.
      await driver.close();
      await store.close();
      await dispatcher.close();
    },
  };
}
