// Options of the simulator and their parsing from `vllm serve`-style arguments plus SIM_* environment
// variables. Pure: no I/O, so the CLI, the programmatic API and the tests share one definition.

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

type Kind = 'string' | 'int' | 'number' | 'bool' | 'list' | 'failure' | 'status' | 'nullableInt';

interface Knob {
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
  {
    key: 'weightsDownloadMs',
    flag: '--weights-download-ms',
    env: 'SIM_WEIGHTS_DOWNLOAD_MS',
    kind: 'int',
  },
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

// vLLM flags that never take a value; every other unknown `--flag` consumes the next argument unless
// that argument starts with `--` (or the flag is written `--flag=value`).
const vllmBooleanFlags = new Set([
  '--trust-remote-code',
  '--enforce-eager',
  '--disable-log-requests',
  '--disable-log-stats',
  '--enable-chunked-prefill',
  '--no-enable-chunked-prefill',
  '--enable-auto-tool-choice',
  '--disable-custom-all-reduce',
  '--enable-lora',
  '--disable-fastapi-docs',
  '--enable-log-requests',
  '--disable-frontend-multiprocessing',
  '--enable-server-load-tracking',
  '--headless',
  '--no-enable-log-requests',
  '--disable-uvicorn-access-log',
  '--enable-sleep-mode',
  '--skip-tokenizer-init',
  '--enable-expert-parallel',
]);

export class ConfigError extends Error {}

export interface ParsedArgs {
  options: EngineSimOptions;
  /** Unknown vLLM flags, accepted and ignored; logged at start-up. */
  ignored: string[];
  help: boolean;
}

function convert(knob: Knob, raw: string, source: string): unknown {
  switch (knob.kind) {
    case 'string':
      return raw;
    case 'list':
      return raw
        .split(/[\s,]+/)
        .map((s) => s.trim())
        .filter(Boolean);
    case 'int':
    case 'nullableInt': {
      if (knob.kind === 'nullableInt' && (raw === 'none' || raw === '')) return null;
      if (!/^\d+$/.test(raw))
        throw new ConfigError(`${source}: expected a non-negative integer, got '${raw}'`);
      return Number(raw);
    }
    case 'number': {
      if (!/^(\d+(\.\d*)?|\.\d+)$/.test(raw))
        throw new ConfigError(`${source}: expected a non-negative number, got '${raw}'`);
      return Number(raw);
    }
    case 'bool': {
      if (/^(1|true|yes|on)$/i.test(raw)) return true;
      if (/^(0|false|no|off)$/i.test(raw)) return false;
      throw new ConfigError(`${source}: expected true or false, got '${raw}'`);
    }
    case 'failure': {
      if (raw === '' || raw === 'none') return null;
      if (raw === 'oom' || raw === 'gated') return raw;
      throw new ConfigError(`${source}: expected oom, gated or none, got '${raw}'`);
    }
    case 'status': {
      if (raw === '' || raw === 'none') return null;
      const n = Number(raw);
      if (!Number.isInteger(n) || n < 400 || n > 599)
        throw new ConfigError(`${source}: expected an HTTP status 400-599, got '${raw}'`);
      return n;
    }
  }
}

function assign(options: EngineSimOptions, knob: Knob, value: unknown): void {
  (options as unknown as Record<string, unknown>)[knob.key] = value;
}

/** Parses `vllm serve` arguments over SIM_* environment variables over the defaults. */
export function parseArgs(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
): ParsedArgs {
  const options: EngineSimOptions = { ...defaultOptions, servedModelNames: [] };
  const ignored: string[] = [];
  let help = false;

  for (const knob of knobs) {
    const raw = knob.env === null ? undefined : env[knob.env];
    if (raw !== undefined && raw !== '') assign(options, knob, convert(knob, raw, knob.env!));
  }

  const byFlag = new Map(knobs.map((k) => [k.flag, k]));
  const positional: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '-h' || arg === '--help') {
      help = true;
      continue;
    }
    if (arg === 'serve' && i === 0) continue; // `engine-sim serve <model>` reads like `vllm serve <model>`
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const flag = eq === -1 ? arg : arg.slice(0, eq);
    const knob = byFlag.get(flag);
    const next = argv[i + 1];
    const nextIsValue = next !== undefined && !next.startsWith('--');
    if (knob) {
      if (knob.kind === 'bool' && eq === -1) {
        // `--hang` alone means true; `--hang false` is accepted too.
        if (nextIsValue && /^(0|1|true|false|yes|no|on|off)$/i.test(next)) {
          assign(options, knob, convert(knob, next, flag));
          i++;
        } else assign(options, knob, true);
        continue;
      }
      if (knob.kind === 'list' && eq === -1) {
        // vLLM's --served-model-name takes one or more names.
        const names: string[] = [];
        while (argv[i + 1] !== undefined && !argv[i + 1]!.startsWith('--')) names.push(argv[++i]!);
        if (names.length === 0) throw new ConfigError(`${flag} needs a value`);
        assign(options, knob, names);
        continue;
      }
      let raw: string;
      if (eq !== -1) raw = arg.slice(eq + 1);
      else if (next !== undefined) {
        raw = next;
        i++;
      } else throw new ConfigError(`${flag} needs a value`);
      assign(options, knob, convert(knob, raw, flag));
      continue;
    }
    const negated = flag.startsWith('--no-') ? byFlag.get('--' + flag.slice('--no-'.length)) : undefined;
    if (negated?.kind === 'bool' && eq === -1) {
      // `--no-enable-prefix-caching`, `--no-sim-headers`: vLLM's negative form of a boolean flag.
      assign(options, negated, false);
      continue;
    }
    // An unknown vLLM flag: accept and ignore, with its value if it has one.
    if (eq === -1 && !vllmBooleanFlags.has(flag) && nextIsValue) {
      ignored.push(`${flag} ${next}`);
      i++;
    } else ignored.push(arg);
  }

  if (positional.length > 1) throw new ConfigError(`unexpected arguments: ${positional.slice(1).join(' ')}`);
  if (positional[0] !== undefined) options.model = positional[0];
  if (options.servedModelNames.length === 0) options.servedModelNames = [options.model];
  validate(options);
  return { options, ignored, help };
}

/** Fills in defaults for programmatic callers and checks ranges. */
export function resolveOptions(partial: Partial<EngineSimOptions>): EngineSimOptions {
  const options: EngineSimOptions = { ...defaultOptions, ...partial };
  if (!partial.servedModelNames || partial.servedModelNames.length === 0)
    options.servedModelNames = [options.model];
  validate(options);
  return options;
}

function validate(o: EngineSimOptions): void {
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
    'A vLLM-compatible engine simulator. Unknown vLLM flags are accepted and ignored.',
    '',
  ];
  for (const k of knobs) {
    const def = (defaultOptions as unknown as Record<string, unknown>)[k.key];
    const shown = Array.isArray(def) ? '(model)' : def === null ? '-' : String(def);
    lines.push(`  ${k.flag.padEnd(32)} ${(k.env ?? '').padEnd(34)} default ${shown}`);
  }
  return lines.join('\n') + '\n';
}
