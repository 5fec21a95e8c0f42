// `vllm serve`-style arguments (and SIM_* environment variables) into the simulator's options, refused
// as vLLM's own parser refuses them. Pure: no I/O. The options and their table are in ./config.ts.

import { ConfigError, defaultOptions, knobs, validate, type EngineSimOptions, type Knob } from './config.ts';
import { vllmFlags, type VllmValues } from './vllm-flags.ts';

/**
 * An argument vLLM's parser refuses, reported as argparse reports it: `stderr` is the usage line and
 * `<prog>: error: <message>`, and the process exits 2. As `vllm serve` (a leading `serve`) the
 * unrecognized arguments are reported by the top-level `vllm` parser and the others by `vllm serve`;
 * without it the simulator stands for the image's entrypoint (`python3 -m
 * vllm.entrypoints.openai.api_server`, prog `api_server.py`).
 */
export class UsageError extends ConfigError {
  readonly prog: string;
  readonly usageLine: string;

  constructor(prog: string, usageLine: string, message: string) {
    super(message);
    this.prog = prog;
    this.usageLine = usageLine;
  }

  get stderr(): string {
    return `${this.usageLine}\n${this.prog}: error: ${this.message}\n`;
  }
}

/** `vllm serve … --model m`: vLLM raises a ValueError (exit status 1), not an argparse error. */
export class ModelFlagError extends ConfigError {
  get stderr(): string {
    return `ValueError: ${this.message}\n`;
  }
}

export interface ParsedArgs {
  options: EngineSimOptions;
  /** vLLM options the simulator does not model (vLLM has them: accepted and ignored), with their values. */
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

// Every option the parser knows: vLLM's (vllm-flags.ts, extracted from its source) and the
// simulator's own knobs. A knob that is a vLLM option takes its values the way vLLM's does.
const simOnlyBools = new Set(
  knobs.filter((k) => k.kind === 'bool' && !vllmFlags.has(k.flag)).map((k) => k.flag),
);
const known = new Map<string, VllmValues>(vllmFlags);
for (const k of knobs) {
  if (known.has(k.flag)) continue;
  known.set(k.flag, k.kind === 'bool' ? '?' : k.kind === 'list' ? '+' : '1');
  if (k.kind === 'bool') known.set('--no-' + k.flag.slice(2), '0');
}
const longOptions = [...known.keys()].filter((f) => f.startsWith('--'));

// argparse treats `-5` and `-.5` as values, not options (no option of vLLM looks like a number).
const isValue = (arg: string | undefined): boolean =>
  arg !== undefined && (!arg.startsWith('-') || arg === '-' || /^-\d+$|^-\d*\.\d+$/.test(arg));

/** FlexibleArgumentParser: `--max_model_len` is `--max-model-len` (up to a `.` of a JSON key). */
function normalise(name: string): string {
  if (!name.startsWith('--')) return name;
  const dot = name.indexOf('.');
  const head = dot === -1 ? name : name.slice(0, dot);
  return head.replaceAll('_', '-') + (dot === -1 ? '' : name.slice(dot));
}

/**
 * Parses `vllm serve` arguments over SIM_* environment variables over the defaults, refusing what
 * vLLM's parser refuses (UsageError; the version of vllm-flags.ts): an option it does not have, an
 * ambiguous abbreviation, a missing value. vLLM options the simulator does not model are ignored.
 */
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

  const asServe = argv[0] === 'serve'; // `engine-sim serve <model>` reads like `vllm serve <model>`
  const args = asServe ? argv.slice(1) : argv;
  if (asServe && args.includes('--model'))
    // FlexibleArgumentParser.parse_args raises this before argparse runs: a traceback, exit status 1
    throw new ModelFlagError(
      'With `vllm serve`, you should provide the model as a positional argument or in a config file instead of via the `--model` option.',
    );
  const refuse = (message: string, top = false): never => {
    if (!asServe)
      throw new UsageError('api_server.py', 'usage: api_server.py [-h] [options] [model_tag]', message);
    if (top)
      throw new UsageError(
        'vllm',
        'usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...',
        message,
      );
    throw new UsageError('vllm serve', 'usage: vllm serve [model_tag] [options]', message);
  };

  const byFlag = new Map(knobs.map((k) => [k.flag, k]));
  let model: string | undefined;
  const unrecognized: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (isValue(arg)) {
      if (model === undefined) model = arg;
      else unrecognized.push(arg);
      continue;
    }
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    let given = normalise(eq === -1 ? arg : arg.slice(0, eq));
    let inline = eq === -1 ? undefined : arg.slice(eq + 1);
    if (/^-O[^.=]/.test(given) || /^-O=/.test(arg)) {
      // -O3, -O=3: the compilation level
      inline = arg.slice(arg[2] === '=' ? 3 : 2);
      given = '-O';
    }
    // `--compilation-config.level 3`: a key of a JSON option, passed to that option
    const json = given.startsWith('-') && given.includes('.');
    let name = json ? given.slice(0, given.indexOf('.')) : given;
    if (!known.has(name) && name.startsWith('--')) {
      // argparse takes an unambiguous abbreviation of a long option
      const matches = longOptions.filter((f) => f.startsWith(name));
      if (matches.length > 1) refuse(`ambiguous option: ${given} could match ${matches.join(', ')}`);
      if (matches.length === 1) name = matches[0]!;
    }
    const values = known.get(name);
    if (values === undefined || (json && values !== '1')) {
      unrecognized.push(arg);
      continue;
    }
    if (name === '-h' || name === '--help') {
      help = true;
      continue;
    }
    const taken: string[] = [];
    if (inline !== undefined) {
      if (values === '0') refuse(`argument ${name}: ignored explicit argument '${inline}'`);
      taken.push(inline);
    } else if (values === '1') {
      if (!isValue(args[i + 1])) refuse(`argument ${name}: expected one argument`);
      taken.push(args[++i]!);
    } else if (values === '+') {
      while (isValue(args[i + 1])) taken.push(args[++i]!);
      if (taken.length === 0) refuse(`argument ${name}: expected at least one argument`);
    } else if (values === '?' && isValue(args[i + 1])) {
      // the simulator's own switches take an optional true/false (`--hang false`)
      if (!simOnlyBools.has(name) || /^(0|1|true|false|yes|no|on|off)$/i.test(args[i + 1]!))
        taken.push(args[++i]!);
    }

    const knob = byFlag.get(name);
    const negated = name.startsWith('--no-') ? byFlag.get('--' + name.slice('--no-'.length)) : undefined;
    if (json || (!knob && !negated)) ignored.push([arg, ...(inline === undefined ? taken : [])].join(' '));
    else if (negated?.kind === 'bool') assign(options, negated, false);
    else if (knob!.kind === 'bool')
      assign(options, knob!, taken.length === 0 ? true : convert(knob!, taken[0]!, name));
    else if (knob!.kind === 'list') assign(options, knob!, taken);
    else assign(options, knob!, convert(knob!, taken[0]!, name));
  }
  if (unrecognized.length > 0) refuse(`unrecognized arguments: ${unrecognized.join(' ')}`, true);

  if (model !== undefined) options.model = model;
  if (options.servedModelNames.length === 0) options.servedModelNames = [options.model];
  validate(options);
  return { options, ignored, help };
}
