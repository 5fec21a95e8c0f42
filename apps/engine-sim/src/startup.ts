// The simulator's start-up, in the stages a vLLM start goes through and a wake receipt reports:
// the weights (from the node's Hugging Face cache, or downloaded once per node), torch.compile and
// CUDA-graph capture (fast when vLLM's compile cache on the node holds this model's artifacts),
// then loading onto the GPU (`startupDelayMs`). Each stage logs as vLLM does.
//
// - Weights: a marker where the hub cache keeps the model's files ($HF_HOME/hub/models--org--name).
//   Missing, the start downloads them (`weightsDownloadMs`; with HF_ENDPOINT set, one GET of the
//   model's weights file from that hub, so a test hub counts downloads). Replicas starting together
//   on one node share the download as huggingface_hub's file lock makes them: the first takes a lock
//   file and downloads, the others wait for the marker (a lock left by a dead process is taken over).
// - Compile: a marker under $VLLM_CACHE_ROOT/torch_compile_cache keyed by the model. Missing, the
//   start compiles (`compileMs`) and leaves it; present, it costs `compileCachedMs`.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, openSync, closeSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { EngineSimOptions } from './config.ts';
import { vllmLogLine } from './errors.ts';

type Log = (line: string) => void;
/** The environment a start reads its caches and hub from (HF_HOME, HF_ENDPOINT, HF_TOKEN, VLLM_CACHE_ROOT). */
export type StartEnv = Record<string, string | undefined>;

const WEIGHTS_FILE = 'model.safetensors';

/** The start-up stages, in order; resolves when the engine may serve (or rejects when `signal` aborts). */
export async function startUp(
  o: EngineSimOptions,
  log: Log,
  signal: AbortSignal,
  env: StartEnv = process.env,
): Promise<void> {
  const started = performance.now();
  if (o.weightsDownloadMs > 0) await weights(o, log, signal, env);
  if (o.compileMs > 0) await compile(o, log, signal, env);
  await sleep(o.startupDelayMs, undefined, { signal });
  if (o.weightsDownloadMs > 0 || o.compileMs > 0)
    log(
      vllmLogLine(
        'INFO',
        'gpu_model_runner.py:1865',
        `Model loading took ${((performance.now() - started) / 1000).toFixed(2)} seconds`,
      ),
    );
}

async function weights(o: EngineSimOptions, log: Log, signal: AbortSignal, env: StartEnv): Promise<void> {
  const hfHome = env.HF_HOME ?? path.join(homedir(), '.cache', 'huggingface');
  const dir = path.join(hfHome, 'hub', `models--${o.model.replaceAll('/', '--')}`);
  const marker = path.join(dir, 'engine-sim-weights');
  const lock = path.join(dir, '.engine-sim-download.lock');
  // How old a lock may get before its holder is taken for dead.
  const staleMs = o.weightsDownloadMs * 2 + 10_000;
  for (let announced = false; ;) {
    if (existsSync(marker)) {
      log(vllmLogLine('INFO', 'weight_utils.py:254', `Using model weights cached in ${dir}`));
      return;
    }
    mkdirSync(dir, { recursive: true });
    let held = false;
    try {
      closeSync(openSync(lock, 'wx'));
      held = true;
    } catch {
      if (Date.now() - mtime(lock) > staleMs) rmSync(lock, { force: true });
    }
    if (held) {
      try {
        log(vllmLogLine('INFO', 'weight_utils.py:241', `Downloading model weights of ${o.model} to ${dir}`));
        await download(o, signal, env);
        await sleep(o.weightsDownloadMs, undefined, { signal });
        writeFileSync(marker, `${o.model}\n`);
      } finally {
        rmSync(lock, { force: true });
      }
      return;
    }
    if (!announced) {
      announced = true;
      log(
        vllmLogLine(
          'INFO',
          'weight_utils.py:247',
          `Waiting for another process downloading model weights of ${o.model} to ${dir}`,
        ),
      );
    }
    await sleep(50, undefined, { signal });
  }
}

/** One GET of the weights from the hub the start was given (none without HF_ENDPOINT). */
async function download(o: EngineSimOptions, signal: AbortSignal, env: StartEnv): Promise<void> {
  const hub = env.HF_ENDPOINT;
  if (!hub) return;
  const token = env.HF_TOKEN ?? env.HUGGING_FACE_HUB_TOKEN;
  const res = await fetch(`${hub.replace(/\/+$/, '')}/${o.model}/resolve/main/${WEIGHTS_FILE}`, {
    signal,
    ...(token ? { headers: { authorization: `Bearer ${token}` } } : {}),
  });
  await res.arrayBuffer();
  if (!res.ok) throw new Error(`downloading ${o.model} from ${hub}: HTTP ${res.status}`);
}

async function compile(o: EngineSimOptions, log: Log, signal: AbortSignal, env: StartEnv): Promise<void> {
  const root = env.VLLM_CACHE_ROOT ?? path.join(homedir(), '.cache', 'vllm');
  const key = createHash('sha256').update(o.model).digest('hex').slice(0, 10);
  const dir = path.join(root, 'torch_compile_cache', key);
  const marker = path.join(dir, 'engine-sim-compiled');
  const cached = existsSync(marker);
  const t0 = performance.now();
  await sleep(cached ? o.compileCachedMs : o.compileMs, undefined, { signal });
  if (!cached) {
    mkdirSync(dir, { recursive: true });
    writeFileSync(marker, `${o.model}\n`);
  }
  log(
    vllmLogLine(
      'INFO',
      'backends.py:162',
      `${cached ? 'Directly load the compiled graph(s) from the cache' : 'Compiling a graph for dynamic shape'}; torch.compile takes ${((performance.now() - t0) / 1000).toFixed(2)} s in total (cache ${dir})`,
    ),
  );
}

function mtime(file: string): number {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return Date.now();
  }
}
