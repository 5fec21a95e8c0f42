// Local mode: dedicated endpoints with no cluster. Endpoints are rows in the API's database served
// from an in-process cache, each replica is a supervised process on this machine, and the same
// controller loop and reconciler as on Kubernetes (core/) drive them.
import path from 'node:path';
import type { Catalog, WakeReceipt } from '@berth/crds';
import type { Logger } from 'pino';
import type { ReconcilerConfig } from '../core/config.ts';
import type { TerminationHook } from '../core/runtime.ts';
import { startController } from '../core/controller.ts';
import { processDriver } from './driver.ts';
import { logFiles, type LogFiles } from './logfiles.ts';
import { keyOf, localEndpointStore, type LocalEndpointRepository, type LocalEndpointStore } from './store.ts';
import type { EngineCommand } from './supervisor.ts';

export interface LocalRuntimeOptions {
  config: ReconcilerConfig;
  catalog: Catalog;
  /** Where endpoints are kept (the API's database). */
  repository: LocalEndpointRepository;
  /** The command that runs one replica: the engine simulator or `vllm serve`. */
  engine: EngineCommand;
  /** Appended to every engine's arguments. */
  extraArgs: string[];
  /** Endpoint logs go to `<dataDir>/logs`, replica pid files to `<dataDir>/run`. */
  dataDir: string;
  /** Size of an endpoint's log file before it is rotated. */
  logMaxBytes: number;
  /** How long a stopping engine may drain after SIGTERM. */
  stopGraceMs: number;
  /** The engines' environment (HF_TOKEN is their hub token); default this process's. */
  env?: NodeJS.ProcessEnv;
  log: Logger;
  /** Told how many processes of an endpoint run whenever one starts or exits (GPU metering). */
  onRunning?: (id: string, running: number) => void;
  /** Effects outside the runtime before a terminated endpoint is gone (billing closes its record). */
  termination?: TerminationHook;
  /** A wake completed: its receipt, once (the API's berth_endpoint_wake_stage_seconds). */
  onWake?: (receipt: WakeReceipt) => void;
}

export interface LocalRuntime {
  /** The endpoints, as the API reads and changes them. */
  endpoints: LocalEndpointStore;
  /** Where each endpoint's Ready replicas listen, and a watch on it. */
  replicas: {
    addresses(id: string): readonly string[];
    watch(id: string, fn: (addresses: readonly string[]) => void): () => void;
  };
  /** Each endpoint's log: its processes' output, the supervisor's lines and the reconciler's events. */
  logs: LogFiles;
  /** Stops the reconciler, then every engine (they drain), then waits for the store's writes. */
  close(): Promise<void>;
}

/** Resolves once the endpoints are loaded and every one of them is queued for a first pass. */
export async function startLocalRuntime(o: LocalRuntimeOptions): Promise<LocalRuntime> {
  const logs = logFiles(path.join(o.dataDir, 'logs'), o.logMaxBytes);
  const controller = startController(
    {
      config: o.config,
      catalog: o.catalog,
      log: o.log,
      ...(o.termination ? { termination: o.termination } : {}),
      ...(o.onWake ? { observer: { wake: o.onWake } } : {}),
    },
    (enqueue) => {
      const store = localEndpointStore(o.repository, {
        onChange: enqueue,
        recordEvent: (ep, ev) => logs.note(ep.metadata.name, `event ${ev.type} ${ev.reason}: ${ev.message}`),
      });
      const driver = processDriver({
        engine: o.engine,
        extraArgs: o.extraArgs,
        runDir: path.join(o.dataDir, 'run'),
        logs,
        log: o.log,
        crashLoopRestarts: o.config.crashLoopRestarts,
        stopGraceMs: o.stopGraceMs,
        ...(o.env ? { env: o.env } : {}),
        onChange: (id) => {
          enqueue(keyOf(id));
          o.onRunning?.(id, driver.running(id));
        },
      });
      return {
        store: store.reconciler,
        driver,
        endpoints: store,
        keys: () => store.keys(),
        // After a restart nothing runs: endpoints that were up go through `building` again and start
        // their processes; hibernated ones stay asleep until a request; failed ones stay failed.
        start: () => store.load(),
        // Engines drain their requests in flight (SIGTERM) before the API's database closes.
        stop: async () => {
          await driver.close();
          await store.close();
        },
        // The Kubernetes garbage collector's part: stop the processes, and drop the logs.
        terminate: async (ep) => {
          await driver.remove(ep.metadata.name);
          logs.remove(ep.metadata.name);
        },
        // Deleted before it ever had a finalizer (a pass may have started it meanwhile).
        gone: (key) => driver.remove(key.slice(key.indexOf('/') + 1)),
      };
    },
  );
  try {
    await controller.started;
  } catch (err) {
    await controller.stop(); // the endpoints could not be loaded: start nothing
    throw err;
  }
  const { endpoints, driver } = controller.runtime;
  return {
    endpoints,
    replicas: { addresses: (id) => driver.addresses(id), watch: (id, fn) => driver.watchAddresses(id, fn) },
    logs,
    close: () => controller.stop(),
  };
}

export { processDriver, type ProcessDriver, type ProcessDriverOptions } from './driver.ts';
export { wakeStages } from '../core/placement.ts';
export { crashLoop, fatalExit, lastLines } from './exits.ts';
export { logFiles, type LogFiles } from './logfiles.ts';
export {
  keyOf,
  LOCAL_NAMESPACE,
  localEndpointStore,
  type LocalEndpointRepository,
  type LocalEndpointStore,
} from './store.ts';
export { freePort, withAddress, type EngineCommand } from './supervisor.ts';
