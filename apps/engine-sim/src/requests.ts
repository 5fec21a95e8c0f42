// Request handling without I/O: a raw body becomes a validated request or vLLM's error for it, and
// the x-sim-* headers become the request's plan. vLLM validates in this order too: JSON, shape,
// model, sampling parameters, then the context length.
import type http from 'node:http';
import type { EngineSimOptions } from './config.ts';
import type { EmbeddingInput, EmbeddingRequest } from './embeddings.ts';
import {
  backgroundNotSupported,
  badRequest,
  embeddingInputTooLong,
  maxTokensTooLarge,
  modelNotFound,
  promptTooLong,
  responseNotFound,
  validationError,
  type VllmError,
} from './errors.ts';
import { headerInt } from './http.ts';
import type { GenerationRequest, Kind, Plan, ResponsesEcho } from './job.ts';
import {
  BlockHasher,
  chatTurns,
  completionPrompt,
  contentText,
  countTokens,
  renderChat,
  tokenIdsPrompt,
  type ChatTurn,
  type PromptInfo,
  type ToolCallText,
} from './text.ts';
import { planToolTurn, type ToolChoice, type ToolPlan } from './tools.ts';

/** A parse outcome: the value, or the error vLLM would answer with. */
export type Parsed<T> = { ok: true; value: T } | { ok: false; error: VllmError };

/** Internal: a refusal travelling up through the helpers below. */
class Refused {
  readonly error: VllmError;
  constructor(error: VllmError) {
    this.error = error;
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

// pydantic-style validation messages, as vLLM's RequestValidationError handler passes them through.
function fieldError(type: string, loc: string, msg: string): Refused {
  return new Refused(
    validationError(`[{'type': '${type}', 'loc': ('body', '${loc}'), 'msg': '${msg}'}]`, null),
  );
}

/** An optional field of one JSON type: its value, null when absent or null, pydantic's 400 otherwise. */
function optional<T>(
  body: Record<string, unknown>,
  key: string,
  fits: (v: unknown) => v is T,
  type: string,
  what: string,
): T | null {
  const v = body[key];
  if (v === undefined || v === null) return null;
  if (!fits(v)) throw fieldError(type, key, `Input should be a valid ${what}`);
  return v;
}

const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const isString = (v: unknown): v is string => typeof v === 'string';
const optionalInt = (body: Record<string, unknown>, key: string) =>
  optional(body, key, isInt, 'int_type', 'integer');
const optionalNumber = (body: Record<string, unknown>, key: string) =>
  optional(body, key, isNumber, 'float_type', 'number');
const optionalString = (body: Record<string, unknown>, key: string) =>
  optional(body, key, isString, 'string_type', 'string');

/** The JSON object of a body, or vLLM's 400 for invalid JSON or a non-object. */
function parseObject(raw: Buffer): Record<string, unknown> {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch (err) {
    throw new Refused(
      validationError(
        `[{'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': '${(err as Error).message.replace(/'/g, '"')}'}}]`,
      ),
    );
  }
  if (!isObject(body))
    throw fieldError(
      'model_attributes_type',
      '',
      'Input should be a valid dictionary or object to extract fields from',
    );
  return body;
}

/** Runs a parser whose helpers throw Refused, turning the refusal into a value. */
function parsed<T>(parse: () => T): Parsed<T> {
  try {
    return { ok: true, value: parse() };
  } catch (err) {
    if (err instanceof Refused) return { ok: false, error: err.error };
    throw err;
  }
}

function checkModel(body: Record<string, unknown>, served: ReadonlySet<string>): void {
  const model = body.model;
  if (model !== undefined && model !== null && (typeof model !== 'string' || !served.has(model)))
    throw new Refused(modelNotFound(String(model)));
}

function hasherFor(o: EngineSimOptions): BlockHasher | null {
  return o.enablePrefixCaching ? new BlockHasher(o.blockSize) : null;
}

function checkLength(o: EngineSimOptions, prompt: PromptInfo, maxTokens: number | null): void {
  if (prompt.tokens >= o.maxModelLen) throw new Refused(promptTooLong(o.maxModelLen, prompt.tokens));
  if (maxTokens !== null && prompt.tokens + maxTokens > o.maxModelLen)
    throw new Refused(maxTokensTooLarge(o.maxModelLen, prompt.tokens, maxTokens));
}

function checkMaxTokens(maxTokens: number | null, param: string): void {
  if (maxTokens !== null && maxTokens < 1)
    throw new Refused(badRequest(`${param} must be at least 1, got ${maxTokens}.`, param));
}

// --- tools ---

/** Function names of a tools list: Chat's `{type, function: {name}}` or Responses' `{type, name}`. */
function toolNames(body: Record<string, unknown>): string[] {
  const tools = body.tools;
  if (tools === undefined || tools === null) return [];
  if (!Array.isArray(tools)) throw fieldError('list_type', 'tools', 'Input should be a valid list');
  const names: string[] = [];
  for (const t of tools) {
    if (!isObject(t)) throw fieldError('model_type', 'tools', 'Input should be an object');
    const fn = isObject(t.function) ? t.function : t;
    if (t.type !== undefined && t.type !== 'function') continue; // mcp, web_search…: not the model's to call
    if (typeof fn.name !== 'string') throw fieldError('missing', 'tools', 'Field required');
    names.push(fn.name);
  }
  return names;
}

function toolChoice(body: Record<string, unknown>, names: readonly string[], kind: Kind): ToolChoice {
  const c = body.tool_choice;
  if (c === undefined || c === null) return 'auto';
  if (kind === 'chat' && c !== 'none' && (body.tools === undefined || body.tools === null))
    throw new Refused(badRequest('When using `tool_choice`, `tools` must be set.', 'tool_choice'));
  if (c === 'auto' || c === 'none' || c === 'required') return c;
  if (isObject(c) && c.type === 'function') {
    const fn = isObject(c.function) ? c.function : c;
    if (typeof fn.name === 'string') {
      if (!names.includes(fn.name))
        throw new Refused(
          badRequest(
            'The tool specified in `tool_choice` does not match any of the specified `tools`',
            'tool_choice',
          ),
        );
      return { name: fn.name };
    }
  }
  throw fieldError('literal_error', 'tool_choice', "Input should be 'none', 'auto' or 'required'");
}

function planTools(body: Record<string, unknown>, turns: readonly ChatTurn[], kind: Kind): ToolPlan {
  const names = toolNames(body);
  return planToolTurn(turns, names, toolChoice(body, names, kind));
}

// --- Chat Completions and Completions ---

function promptOf(
  kind: Kind,
  body: Record<string, unknown>,
  o: EngineSimOptions,
): { prompt: PromptInfo; tools: ToolPlan } {
  if (kind === 'chat') {
    const messages = body.messages;
    if (messages === undefined) throw fieldError('missing', 'messages', 'Field required');
    if (!Array.isArray(messages)) throw fieldError('list_type', 'messages', 'Input should be a valid list');
    if (!messages.every(isObject)) throw fieldError('model_type', 'messages', 'Input should be an object');
    const turns = chatTurns(messages);
    return { prompt: renderChat(turns, hasherFor(o)), tools: planTools(body, turns, kind) };
  }
  const p = body.prompt;
  const none: ToolPlan = { type: 'none' };
  if (p === undefined || p === null) throw fieldError('missing', 'prompt', 'Field required');
  if (typeof p === 'string') return { prompt: completionPrompt(p, hasherFor(o)), tools: none };
  if (Array.isArray(p) && p.length > 0 && p.every((t) => typeof t === 'number'))
    return { prompt: tokenIdsPrompt(p, hasherFor(o)), tools: none };
  if (Array.isArray(p) && p.length === 1 && typeof p[0] === 'string')
    return { prompt: completionPrompt(p[0], hasherFor(o)), tools: none };
  throw new Refused(
    badRequest('engine-sim supports one prompt (a string or token ids) per request.', 'prompt'),
  );
}

/** Validates a `/v1/chat/completions` or `/v1/completions` body against the served model. */
export function parseGeneration(
  kind: 'chat' | 'completion',
  raw: Buffer,
  o: EngineSimOptions,
  served: ReadonlySet<string>,
): Parsed<GenerationRequest> {
  return parsed(() => {
    const body = parseObject(raw);
    const { prompt, tools } = promptOf(kind, body, o);
    checkModel(body, served);

    const maxTokensV = optionalInt(body, 'max_tokens');
    const maxCompletionV = kind === 'chat' ? optionalInt(body, 'max_completion_tokens') : null;
    const seed = optionalInt(body, 'seed');
    const maxTokens = maxCompletionV ?? maxTokensV;
    checkMaxTokens(maxTokens, 'max_tokens');
    checkLength(o, prompt, maxTokens);

    const stream = body.stream === true;
    const so = isObject(body.stream_options) ? body.stream_options : {};
    const includeUsage = stream && so.include_usage === true;
    return {
      kind,
      prompt,
      stream,
      includeUsage,
      continuousUsage: includeUsage && so.continuous_usage_stats === true,
      maxTokens,
      ignoreEos: body.ignore_eos === true,
      seed,
      tools,
      responses: null,
    };
  });
}

// --- Responses ---

/** The conversation of a Responses request: instructions, then the input items as template turns. */
function responsesTurns(body: Record<string, unknown>, instructions: string | null): ChatTurn[] {
  const turns: ChatTurn[] = [];
  const turn = (role: string, content: string, toolCallId: string | null = null): ChatTurn => ({
    role,
    content,
    toolCalls: [],
    toolCallId,
  });
  if (instructions !== null) turns.push(turn('system', instructions));
  const input = body.input;
  if (input === undefined) throw fieldError('missing', 'input', 'Field required');
  if (typeof input === 'string') {
    turns.push(turn('user', input));
    return turns;
  }
  if (!Array.isArray(input)) throw fieldError('list_type', 'input', 'Input should be a valid list');
  let calls: ToolCallText[] | null = null; // consecutive function_call items make one assistant turn
  for (const item of input) {
    if (!isObject(item)) throw fieldError('model_type', 'input', 'Input should be an object');
    if (item.type === 'function_call') {
      if (calls === null) {
        calls = [];
        turns.push({ role: 'assistant', content: '', toolCalls: calls, toolCallId: null });
      }
      calls.push({
        id: typeof item.call_id === 'string' ? item.call_id : '',
        name: typeof item.name === 'string' ? item.name : '',
        arguments: typeof item.arguments === 'string' ? item.arguments : '',
      });
      continue;
    }
    calls = null;
    if (item.type === 'function_call_output')
      turns.push(
        turn('tool', contentText(item.output), typeof item.call_id === 'string' ? item.call_id : null),
      );
    else if (item.type === undefined || item.type === 'message') {
      if (typeof item.role !== 'string') throw fieldError('missing', 'input', 'Field required');
      turns.push(turn(item.role, contentText(item.content)));
    }
    // other items (reasoning, …) carry nothing the simulated model reads
  }
  return turns;
}

/** Validates a `/v1/responses` body (vLLM's ResponsesRequest; no stored responses, as in vLLM by default). */
export function parseResponses(
  raw: Buffer,
  o: EngineSimOptions,
  served: ReadonlySet<string>,
): Parsed<GenerationRequest> {
  return parsed(() => {
    const body = parseObject(raw);
    const instructions = optionalString(body, 'instructions');
    const turns = responsesTurns(body, instructions);
    checkModel(body, served);
    const previous = optionalString(body, 'previous_response_id');
    if (previous !== null) throw new Refused(responseNotFound(previous));
    if (body.background === true) throw new Refused(backgroundNotSupported());
    const tools = planTools(body, turns, 'responses');
    const maxTokens = optionalInt(body, 'max_output_tokens');
    checkMaxTokens(maxTokens, 'max_output_tokens');
    const temperature = optionalNumber(body, 'temperature') ?? 1.0;
    const topP = optionalNumber(body, 'top_p') ?? 1.0;
    const prompt = renderChat(turns, hasherFor(o));
    checkLength(o, prompt, maxTokens);

    const echo: ResponsesEcho = {
      instructions,
      metadata: body.metadata ?? null,
      parallelToolCalls: body.parallel_tool_calls !== false,
      temperature,
      topP,
      toolChoice: body.tool_choice ?? 'auto',
      tools: Array.isArray(body.tools) ? body.tools : [],
      text: body.text ?? null,
      user: optionalString(body, 'user'),
      serviceTier: typeof body.service_tier === 'string' ? body.service_tier : 'auto',
      truncation: typeof body.truncation === 'string' ? body.truncation : 'disabled',
      maxToolCalls: optionalInt(body, 'max_tool_calls'),
      maxOutputTokens: maxTokens ?? o.maxModelLen - prompt.tokens,
    };
    return {
      kind: 'responses',
      prompt,
      stream: body.stream === true,
      includeUsage: false,
      continuousUsage: false,
      maxTokens,
      ignoreEos: body.ignore_eos === true,
      seed: null,
      tools,
      responses: echo,
    };
  });
}

// --- Embeddings ---

function embeddingInputs(input: unknown): EmbeddingInput[] {
  if (input === undefined || input === null) throw fieldError('missing', 'input', 'Field required');
  if (typeof input === 'string') return [input];
  if (!Array.isArray(input)) throw fieldError('list_type', 'input', 'Input should be a valid list');
  if (input.length === 0)
    throw fieldError('too_short', 'input', 'List should have at least 1 item after validation, not 0');
  if (input.every((x) => typeof x === 'string')) return input as string[];
  if (input.every((x) => typeof x === 'number' && Number.isInteger(x))) return [input as number[]];
  if (input.every((x) => Array.isArray(x) && x.every((t) => typeof t === 'number' && Number.isInteger(t))))
    return input as number[][];
  throw fieldError(
    'list_type',
    'input',
    'Input should be a string, a list of strings or a list of token ids',
  );
}

/** Validates a `/v1/embeddings` body (vLLM's EmbeddingCompletionRequest). */
export function parseEmbeddings(
  raw: Buffer,
  o: EngineSimOptions,
  served: ReadonlySet<string>,
): Parsed<EmbeddingRequest> {
  return parsed(() => {
    const body = parseObject(raw);
    const inputs = embeddingInputs(body.input);
    checkModel(body, served);
    const format = body.encoding_format ?? 'float';
    if (format !== 'float' && format !== 'base64')
      throw fieldError('literal_error', 'encoding_format', "Input should be 'float' or 'base64'");
    const dimensions = optionalInt(body, 'dimensions') ?? o.embeddingDimensions;
    if (dimensions < 1 || dimensions > o.embeddingDimensions)
      throw new Refused(
        badRequest(
          `dimensions must be between 1 and ${o.embeddingDimensions}, got ${dimensions}.`,
          'dimensions',
        ),
      );
    let tokens = 0;
    for (const input of inputs) {
      const n = typeof input === 'string' ? countTokens(input) : input.length;
      if (n >= o.maxModelLen) throw new Refused(embeddingInputTooLong(o.maxModelLen, n));
      tokens += n;
    }
    return { inputs, tokens, encoding: format, dimensions };
  });
}

// --- the plan ---

function headerNumber(req: http.IncomingMessage, name: string): number | null {
  const v = req.headers[name];
  if (typeof v !== 'string' || !/^(\d+(\.\d*)?|\.\d+)$/.test(v.trim())) return null;
  return Number(v.trim());
}

/** The knobs for one request: the server's, overridden by x-sim-* headers when those are honoured. */
export function planFor(req: http.IncomingMessage, o: EngineSimOptions): Plan {
  const p: Plan = {
    ttftMs: o.ttftMs,
    itlMs: o.itlMs,
    prefillMsPerToken: o.prefillMsPerToken,
    outputTokens: o.outputTokens,
    failStatus: o.failStatus,
    hang: o.hang,
    stallAfter: o.stallAfterTokens,
    errorAfter: o.errorAfterTokens,
  };
  if (!o.simHeaders) return p;
  const ttft = headerInt(req, 'x-sim-ttft-ms');
  if (ttft !== null) p.ttftMs = ttft;
  const itl = headerInt(req, 'x-sim-itl-ms');
  if (itl !== null) p.itlMs = itl;
  const prefill = headerNumber(req, 'x-sim-prefill-ms-per-token');
  if (prefill !== null) p.prefillMsPerToken = prefill;
  const output = headerInt(req, 'x-sim-output-tokens');
  if (output !== null && output > 0) p.outputTokens = output;
  const fail = headerInt(req, 'x-sim-fail');
  if (fail !== null && fail >= 400 && fail <= 599) p.failStatus = fail;
  const hang = req.headers['x-sim-hang'];
  if (hang === '1' || hang === 'true') p.hang = true;
  const stall = headerInt(req, 'x-sim-stall-after');
  if (stall !== null) p.stallAfter = stall;
  const errorAfter = headerInt(req, 'x-sim-error-after');
  if (errorAfter !== null) p.errorAfter = errorAfter;
  return p;
}
