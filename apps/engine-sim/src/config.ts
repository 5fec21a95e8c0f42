// Options of the simulator: their table (flags, SIM_* environment variables, the README), defaults,
// checks and the knobs a running simulator lets you change. Pure: no I/O, so the CLI, the
// programmatic API and the tests share one definition; the argument parser is ./args.ts.

import { VLLM_VERSION } from './vllm-flags.ts';

export type StartupFailure = 'oom' | 'gated';

export interface EngineSimOptions {
  /** The model id as given to `vllm serve <model>` / `--model`. */
  model: string;
  /** Names the API answers to; the first is echoed in responses. Defaults to `[model]`. */
  servedModelNames: string[];
  host: string;
  /** 0 picks a free port (programmatic use). */
  port: number;
  maxModelLen: number;
  /** vLLM's `--max-num-seqs`: requests running at once; the rest wait in a FIFO queue. */
  maxNumSeqs: number;
  startupDelayMs: number;
  /**
   * Weight download time on a start whose model is not in the Hugging Face cache ($HF_HOME, else
   * ~/.cache/huggingface): the first start of a model on a node pays it, later ones find the
   * weights cached and pay only `startupDelayMs` (loading). 0: no cache model (the default).
   */
  weightsDownloadMs: number;
  /**
   * torch.compile and CUDA-graph capture on a start whose vLLM compile cache ($VLLM_CACHE_ROOT, else
   * ~/.cache/vllm) holds nothing for the model; the start leaves its artifacts for the next one.
   * 0: no compile stage (the default).
   */
  compileMs: number;
  /** The compile stage when the cache holds the model's artifacts (a fifth of a cold one on GPUs). */
  compileCachedMs: number;
  ttftMs: number;
  itlMs: number;
  /** Tokens generated when the request does not ask for fewer (the "natural" answer length). */
  outputTokens: number;
  /** Fail start-up after the delay, as vLLM does when the model does not fit or the repo is gated. */
  failStartup: StartupFailure | null;
  /** When set, start-up fails with the gated-repo error unless HF_TOKEN equals it. */
  requireHfToken: string | null;
  /** Answer every generation request with this HTTP status (5xx) instead of generating. */
  failStatus: number | null;
  /** Accept generation requests and never answer them. */
  hang: boolean;
  /** Streams send this many content chunks, then go silent with the connection open. */
  stallAfterTokens: number | null;
  /** Streams send this many content chunks, then vLLM's mid-stream error frame and `[DONE]`. */
  errorAfterTokens: number | null;
  /** How long SIGTERM / close() lets in-flight requests finish before cutting them. */
  shutdownGraceMs: number;
  /** Honour the x-sim-* request headers (on by default; it is a simulator). */
  simHeaders: boolean;
  /** Serve the /sim/config and /reset_prefix_cache admin routes (on by default). */
  simAdmin: boolean;
  /**
   * Requests in flight (queued, running or hung) beyond which new ones are refused with 429, like an
   * overloaded hosted upstream; null = no limit.
   */
  capacity: number | null;
  /** Prefill time per prompt token not found in the prefix cache, added to TTFT (decimals allowed). */
  prefillMsPerToken: number;
  /** vLLM's `--enable-prefix-caching` (on by default in vLLM V1). */
  enablePrefixCaching: boolean;
  /** Tokens per KV-cache block, vLLM's `--block-size`: the prefix cache's unit. */
  blockSize: number;
  /** Blocks the prefix cache keeps (LRU). */
  prefixCacheBlocks: number;
  /** vLLM's `--enable-prompt-tokens-details`: `usage.prompt_tokens_details.cached_tokens` in chat/completions. */
  enablePromptTokensDetails: boolean;
  /** Length of the vectors `/v1/embeddings` returns (the model's hidden size). */
  embeddingDimensions: number;
}

export const defaultOptions: EngineSimOptions = {
  model: 'sim/engine-sim-1b',
  servedModelNames: [],
  host: '0.0.0.0',
  port: 8000,
  maxModelLen: 4096,
  maxNumSeqs: 256,
  startupDelayMs: 0,
  weightsDownloadMs: 0,
  compileMs: 0,
  compileCachedMs: 0,
  ttftMs: 50,
  itlMs: 20,
  outputTokens: 64,
  failStartup: null,
  requireHfToken: null,
  failStatus: null,
  hang: false,
  stallAfterTokens: null,
  errorAfterTokens: null,
  shutdownGraceMs: 25_000,
  simHeaders: true,
  simAdmin: true,
  capacity: null,
  prefillMsPerToken: 0,
  enablePrefixCaching: true,
  blockSize: 16,
  prefixCacheBlocks: 4096,
  enablePromptTokensDetails: false,
  embeddingDimensions: 384,
};

export type Kind = 'string' | 'int' | 'number' | 'bool' | 'list' | 'failure' | 'status' | 'nullableInt';

export interface Knob {
  key: keyof EngineSimOptions;
  flag: string;
  env: string | null;
  kind: Kind;
}

// One table drives flags, environment variables and the README.
export const knobs: readonly Knob[] = [
  { key: 'model', flag: '--model', env: 'SIM_MODEL', kind: 'string' },
  { key: 'servedModelNames', flag: '--served-model-name', env: 'SIM_SERVED_MODEL_NAME', kind: 'list' },
  { key: 'host', flag: '--host', env: 'SIM_HOST', kind: 'string' },
  { key: 'port', flag: '--port', env: 'SIM_PORT', kind: 'int' },
  { key: 'maxModelLen', flag: '--max-model-len', env: 'SIM_MAX_MODEL_LEN', kind: 'int' },
  { key: 'maxNumSeqs', flag: '--max-num-seqs', env: 'SIM_MAX_NUM_SEQS', kind: 'int' },
  { key: 'startupDelayMs', flag: '--startup-delay-ms', env: 'SIM_STARTUP_DELAY_MS', kind: 'int' },
  { key: 'weightsDownloadMs', flag: '--weights-download-ms', env: 'SIM_WEIGHTS_DOWNLOAD_MS', kind: 'int' },
  { key: 'compileMs', flag: '--compile-ms', env: 'SIM_COMPILE_MS', kind: 'int' },
  { key: 'compileCachedMs', flag: '--compile-cached-ms', env: 'SIM_COMPILE_CACHED_MS', kind: 'int' },
  { key: 'ttftMs', flag: '--ttft-ms', env: 'SIM_TTFT_MS', kind: 'int' },
  { key: 'itlMs', flag: '--itl-ms', env: 'SIM_ITL_MS', kind: 'int' },
  {
    key: 'prefillMsPerToken',
    flag: '--prefill-ms-per-token',
    env: 'SIM_PREFILL_MS_PER_TOKEN',
    kind: 'number',
  },
  { key: 'outputTokens', flag: '--output-tokens', env: 'SIM_OUTPUT_TOKENS', kind: 'int' },
  { key: 'failStartup', flag: '--fail-startup', env: 'SIM_FAIL_STARTUP', kind: 'failure' },
  { key: 'requireHfToken', flag: '--require-hf-token', env: 'SIM_REQUIRE_HF_TOKEN', kind: 'string' },
  { key: 'failStatus', flag: '--fail-status', env: 'SIM_FAIL_STATUS', kind: 'status' },
  { key: 'hang', flag: '--hang', env: 'SIM_HANG', kind: 'bool' },
  {
    key: 'stallAfterTokens',
    flag: '--stall-after-tokens',
    env: 'SIM_STALL_AFTER_TOKENS',
    kind: 'nullableInt',
  },
  {
    key: 'errorAfterTokens',
    flag: '--error-after-tokens',
    env: 'SIM_ERROR_AFTER_TOKENS',
    kind: 'nullableInt',
  },
  { key: 'capacity', flag: '--capacity', env: 'SIM_CAPACITY', kind: 'nullableInt' },
  {
    key: 'enablePrefixCaching',
    flag: '--enable-prefix-caching',
    env: 'SIM_ENABLE_PREFIX_CACHING',
    kind: 'bool',
  },
  { key: 'blockSize', flag: '--block-size', env: 'SIM_BLOCK_SIZE', kind: 'int' },
  { key: 'prefixCacheBlocks', flag: '--prefix-cache-blocks', env: 'SIM_PREFIX_CACHE_BLOCKS', kind: 'int' },
  {
    key: 'enablePromptTokensDetails',
    flag: '--enable-prompt-tokens-details',
    env: 'SIM_ENABLE_PROMPT_TOKENS_DETAILS',
    kind: 'bool',
  },
  {
    key: 'embeddingDimensions',
    flag: '--embedding-dimensions',
    env: 'SIM_EMBEDDING_DIMENSIONS',
    kind: 'int',
  },
  { key: 'shutdownGraceMs', flag: '--shutdown-grace-ms', env: 'SIM_SHUTDOWN_GRACE_MS', kind: 'int' },
  { key: 'simHeaders', flag: '--sim-headers', env: 'SIM_HEADERS', kind: 'bool' },
  { key: 'simAdmin', flag: '--sim-admin', env: 'SIM_ADMIN', kind: 'bool' },
];

export class ConfigError extends Error {}

/** Fills in defaults for programmatic callers and checks ranges. */
export function resolveOptions(partial: Partial<EngineSimOptions>): EngineSimOptions {
  const options: EngineSimOptions = { ...defaultOptions, ...partial };
  if (!partial.servedModelNames || partial.servedModelNames.length === 0)
    options.servedModelNames = [options.model];
  validate(options);
  return options;
}

export function validate(o: EngineSimOptions): void {
  if (o.port > 65535) throw new ConfigError(`--port must be at most 65535, got ${o.port}`);
  if (o.maxModelLen < 2) throw new ConfigError(`--max-model-len must be at least 2, got ${o.maxModelLen}`);
  if (o.maxNumSeqs < 1) throw new ConfigError(`--max-num-seqs must be at least 1, got ${o.maxNumSeqs}`);
  if (o.outputTokens < 1) throw new ConfigError(`--output-tokens must be at least 1, got ${o.outputTokens}`);
  if (o.blockSize < 1) throw new ConfigError(`--block-size must be at least 1, got ${o.blockSize}`);
  if (o.embeddingDimensions < 1)
    throw new ConfigError(`--embedding-dimensions must be at least 1, got ${o.embeddingDimensions}`);
}

/** The knobs a running simulator lets you change (PATCH /sim/config, `handle.configure()`). */
export const runtimeKnobs = [
  'ttftMs',
  'itlMs',
  'prefillMsPerToken',
  'outputTokens',
  'failStatus',
  'hang',
  'stallAfterTokens',
  'errorAfterTokens',
  'capacity',
] as const satisfies readonly (keyof EngineSimOptions)[];

export type RuntimeKnobs = Pick<EngineSimOptions, (typeof runtimeKnobs)[number]>;

/** The current values of the runtime knobs. */
export function runtimeSnapshot(o: EngineSimOptions): RuntimeKnobs {
  return Object.fromEntries(runtimeKnobs.map((k) => [k, o[k]])) as unknown as RuntimeKnobs;
}

function jsonValueFits(kind: Kind, v: unknown): boolean {
  const int = typeof v === 'number' && Number.isInteger(v) && v >= 0;
  switch (kind) {
    case 'int':
      return int;
    case 'nullableInt':
      return v === null || int;
    case 'number':
      return typeof v === 'number' && Number.isFinite(v) && v >= 0;
    case 'bool':
      return typeof v === 'boolean';
    case 'status':
      return v === null || (typeof v === 'number' && Number.isInteger(v) && v >= 400 && v <= 599);
    default:
      return false;
  }
}

const KIND_TEXT: Partial<Record<Kind, string>> = {
  int: 'a non-negative integer',
  nullableInt: 'a non-negative integer or null',
  number: 'a non-negative number',
  bool: 'true or false',
  status: 'an HTTP status 400-599 or null',
};

/**
 * Checks a JSON patch of runtime knobs (`{"capacity": 0}`) against the current options: every key
 * must be a runtime knob with a value of its type, and the result must pass the usual checks.
 */
export function checkRuntimePatch(
  o: EngineSimOptions,
  patch: unknown,
): { ok: true; value: Partial<RuntimeKnobs> } | { ok: false; key: string | null; message: string } {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch))
    return { ok: false, key: null, message: 'expected a JSON object of runtime knobs' };
  const runtime: readonly string[] = runtimeKnobs;
  const byKey = new Map(knobs.filter((k) => runtime.includes(k.key)).map((k) => [k.key as string, k]));
  for (const [key, value] of Object.entries(patch)) {
    const knob = byKey.get(key);
    if (!knob)
      return {
        ok: false,
        key,
        message: `'${key}' is not a runtime knob; runtime knobs: ${runtimeKnobs.join(', ')}`,
      };
    if (!jsonValueFits(knob.kind, value))
      return {
        ok: false,
        key,
        message: `'${key}' must be ${KIND_TEXT[knob.kind]}, got ${JSON.stringify(value)}`,
      };
  }
  try {
    validate({ ...o, ...(patch as Partial<EngineSimOptions>) });
  } catch (err) {
    if (err instanceof ConfigError) return { ok: false, key: null, message: err.message };
    throw err;
  }
  return { ok: true, value: patch as Partial<RuntimeKnobs> };
}

export function usage(): string {
  const lines = [
    'usage: engine-sim [serve] [MODEL] [--model ID] [--port N] [--host ADDR] [options]',
    '',
    `A vLLM-compatible engine simulator. The options of vLLM v${VLLM_VERSION} it does not model are accepted`,
    'and ignored; an option vLLM does not have is refused as vLLM refuses it (exit status 2).',
    '',
  ];
  for (const k of knobs) {
    const def = (defaultOptions as unknown as Record<string, unknown>)[k.key];
    const shown = Array.isArray(def) ? '(model)' : def === null ? '-' : String(def);
    lines.push(`  ${k.flag.padEnd(32)} ${(k.env ?? '').padEnd(34)} default ${shown}`);
  }
  return lines.join('\n') + '\n';
}
