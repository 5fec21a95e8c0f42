// Local mode's composition: the operator's local runtime (endpoints in this API's database, one
// supervised process per replica, the shared reconciler driving them) behind the API's ports. Only
// what is the API's lives here: which engine to run, the hub-token rule of the create route, and the
// log reader; the endpoints' rows are ./repository.ts.
import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import { cliPath } from '@berth/engine-sim';
import type { Catalog, WakeReceipt } from '@berth/crds';
import { reconcilerConfig } from '@berth/operator';
import { startLocalRuntime, type EngineCommand, type LocalEndpointRepository } from '@berth/operator/local';
import type { Logger } from 'pino';
import type { Config } from '../../platform/config.ts';
import { ConfigError } from '../../platform/config.ts';
import { ApiError, endpointChanged, endpointNotFound } from '../../platform/errors.ts';
import type { EndpointRuntime } from '../ports.ts';
import { localEndpointLogs } from './logs.ts';
import type { GpuBilling } from '../../billing/metering.ts';
import { localGpuMeter } from './gpu-meter.ts';

export interface LocalRuntimeOptions {
  config: Config;
  logger: Logger;
  /** Local endpoints' rows (./repository.ts). */
  repository: LocalEndpointRepository;
  catalog: Catalog;
  env?: NodeJS.ProcessEnv;
  /** GPU metering of the endpoints' processes. */
  gpu: GpuBilling;
  now: () => Date;
  /** A wake completed: its receipt, once. */
  onWake?: (receipt: WakeReceipt) => void;
}

// What an engine process may see of the API's environment: what the engine and its libraries read
// (the hub token, CUDA, vLLM, PyTorch, locale, temp dirs), never the API's own secrets (ADMIN_TOKEN,
// DATABASE_URL, KEY_HASH_SECRET, …) — model-repository code runs inside vLLM.
const ENGINE_ENV_NAMES = new Set([
  'PATH',
  'HOME',
  'USER',
  'LOGNAME',
  'SHELL',
  'LANG',
  'LANGUAGE',
  'TZ',
  'TMPDIR',
  'TERM',
  'LD_LIBRARY_PATH',
  'PYTHONPATH',
  'PYTHONHOME',
  'PYTHONUNBUFFERED',
  'VIRTUAL_ENV',
  'OMP_NUM_THREADS',
  'TOKENIZERS_PARALLELISM',
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'NO_PROXY',
  'http_proxy',
  'https_proxy',
  'no_proxy',
  'SSL_CERT_FILE',
  'SSL_CERT_DIR',
  'REQUESTS_CA_BUNDLE',
]);
const ENGINE_ENV_PREFIXES = [
  'LC_',
  'XDG_',
  'HF_',
  'HUGGING_FACE_',
  'HUGGINGFACE_',
  'TRANSFORMERS_',
  'CUDA_',
  'NVIDIA_',
  'NCCL_',
  'VLLM_',
  'TORCH_',
  'PYTORCH_',
  'TRITON_',
  'CONDA_',
  'MKL_',
  'SIM_',
];

/** The allow-listed part of `env` that engine processes get. */
export function engineEnvironment(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(env).filter(
      ([name]) => ENGINE_ENV_NAMES.has(name) || ENGINE_ENV_PREFIXES.some((p) => name.startsWith(p)),
    ),
  );
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

/** The store's `code: 404 | 409` rejections as the API's errors. */
const storeError =
  (id: string) =>
  (err: unknown): never => {
    const code = (err as { code?: unknown }).code;
    if (code === 404) throw endpointNotFound(id);
    if (code === 409) throw endpointChanged(id);
    throw err;
  };

export async function localRuntime(o: LocalRuntimeOptions): Promise<EndpointRuntime> {
  const { config } = o;
  const log = o.logger.child({ runtime: 'local' });
  const meter = localGpuMeter({
    gpu: o.gpu,
    now: o.now,
    logger: log,
    syncIntervalMs: config.BILLING_GPU_SYNC_INTERVAL_MS,
  });
  await meter.recover();
  const rt = await startLocalRuntime({
    config: reconcilerConfig(config),
    catalog: o.catalog,
    repository: o.repository,
    engine: engineCommand(config.BERTH_LOCAL_ENGINE, o.env),
    extraArgs: config.BERTH_LOCAL_ENGINE_ARGS,
    dataDir: config.BERTH_DATA_DIR,
    logMaxBytes: config.BERTH_LOCAL_LOG_MAX_BYTES,
    stopGraceMs: config.BERTH_LOCAL_STOP_GRACE_MS,
    env: engineEnvironment(o.env ?? process.env),
    log,
    onRunning: (id, running) => meter.onRunning(id, running),
    termination: meter.termination,
    ...(o.onWake ? { onWake: o.onWake } : {}),
  });
  await meter.start(
    () => rt.endpoints.list(),
    (id) => rt.endpoints.get(id),
  );
  log.info(
    {
      endpoints: rt.endpoints.list().length,
      engine: config.BERTH_LOCAL_ENGINE,
      dataDir: config.BERTH_DATA_DIR,
    },
    'local runtime: endpoints run as processes on this machine',
  );
  const endpoints = rt.endpoints;
  return {
    kind: 'local',
    endpoints: {
      ready: () => Promise.resolve(),
      get: (id) => endpoints.get(id),
      list: () => endpoints.list(),
      // One process owns local endpoints, and its cache is written before a write returns.
      listFresh: () => Promise.resolve(endpoints.list()),
      watch: (id, fn) => endpoints.watch(id, fn),
      delete: (id) => endpoints.delete(id),
      annotate: (id, annotations) => endpoints.annotate(id, annotations),
      async create({ id, displayName, spec, hubToken }) {
        if (hubToken) {
          throw new ApiError('validation_error', {
            message:
              'Invalid request body: hubToken: not accepted in local mode, where engines read HF_TOKEN from the API process: set HF_TOKEN and start the API again',
            param: 'hubToken',
          });
        }
        return endpoints.create({ id, displayName, spec }).catch(storeError(id));
      },
      update: (id, input) => endpoints.update(id, input).catch(storeError(id)),
      close: async () => {},
    },
    backends: {
      ready: () => Promise.resolve(),
      addresses: (id) => rt.replicas.addresses(id),
      watch: (id, fn) => rt.replicas.watch(id, fn),
      close: async () => {},
    },
    logs: localEndpointLogs(rt.logs),
    ready: () => Promise.resolve(),
    close: async () => {
      await rt.close();
      await meter.close();
    },
  };
}
