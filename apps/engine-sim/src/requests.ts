// Request handling without I/O: a raw body becomes a validated request or vLLM's error for it, and
// the x-sim-* headers become the request's plan. vLLM validates in this order too: JSON, shape,
// model, sampling parameters, then the context length.
import type http from 'node:http';
import type { EngineSimOptions } from './config.ts';
import {
  badRequest,
  maxTokensTooLarge,
  modelNotFound,
  promptTooLong,
  validationError,
  type VllmError,
} from './errors.ts';
import { headerInt } from './http.ts';
import type { GenerationRequest, Kind, Plan } from './job.ts';
import { chatPrompt, completionPrompt, type PromptInfo } from './text.ts';

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A parse outcome: the value, or the error vLLM would answer with. */
export type Parsed<T> = { ok: true; value: T } | { ok: false; error: VllmError };

/** Internal: a refusal travelling up through the helpers below. */
class Refused {
  readonly error: VllmError;
  constructor(error: VllmError) {
    this.error = error;
  }
}

// pydantic-style validation messages, as vLLM's RequestValidationError handler passes them through.
function fieldError(type: string, loc: string, msg: string): Refused {
  return new Refused(
    validationError(`[{'type': '${type}', 'loc': ('body', '${loc}'), 'msg': '${msg}'}]`, null),
  );
}

function optionalInt(body: Record<string, unknown>, key: string): number | null {
  const v = body[key];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isInteger(v))
    throw fieldError('int_type', key, 'Input should be a valid integer');
  return v;
}

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

function promptOf(kind: Kind, body: Record<string, unknown>): PromptInfo {
  if (kind === 'chat') {
    const messages = body.messages;
    if (messages === undefined) throw fieldError('missing', 'messages', 'Field required');
    if (!Array.isArray(messages)) throw fieldError('list_type', 'messages', 'Input should be a valid list');
    if (!messages.every(isObject)) throw fieldError('model_type', 'messages', 'Input should be an object');
    return chatPrompt(messages);
  }
  const p = body.prompt;
  if (p === undefined || p === null) throw fieldError('missing', 'prompt', 'Field required');
  if (typeof p === 'string') return completionPrompt(p);
  if (Array.isArray(p) && p.length > 0 && p.every((t) => typeof t === 'number'))
    return { tokens: p.length, text: p.join(' ') };
  if (Array.isArray(p) && p.length === 1 && typeof p[0] === 'string') return completionPrompt(p[0]);
  throw new Refused(
    badRequest('engine-sim supports one prompt (a string or token ids) per request.', 'prompt'),
  );
}

/** Validates a `/v1/chat/completions` or `/v1/completions` body against the served model. */
export function parseGeneration(
  kind: Kind,
  raw: Buffer,
  o: EngineSimOptions,
  served: ReadonlySet<string>,
): Parsed<GenerationRequest> {
  return parsed(() => {
    const body = parseObject(raw);
    const prompt = promptOf(kind, body);

    const model = body.model;
    if (model !== undefined && model !== null && (typeof model !== 'string' || !served.has(model)))
      throw new Refused(modelNotFound(String(model)));

    const maxTokensV = optionalInt(body, 'max_tokens');
    const maxCompletionV = kind === 'chat' ? optionalInt(body, 'max_completion_tokens') : null;
    const seed = optionalInt(body, 'seed');
    const maxTokens = maxCompletionV ?? maxTokensV;
    if (maxTokens !== null && maxTokens < 1)
      throw new Refused(badRequest(`max_tokens must be at least 1, got ${maxTokens}.`, 'max_tokens'));

    if (prompt.tokens >= o.maxModelLen) throw new Refused(promptTooLong(o.maxModelLen, prompt.tokens));
    if (maxTokens !== null && prompt.tokens + maxTokens > o.maxModelLen)
      throw new Refused(maxTokensTooLarge(o.maxModelLen, prompt.tokens, maxTokens));

    const stream = body.stream === true;
    const so = body.stream_options;
    return {
      kind,
      prompt,
      stream,
      includeUsage: stream && isObject(so) && so.include_usage === true,
      maxTokens,
      ignoreEos: body.ignore_eos === true,
      seed,
    };
  });
}

/** The knobs for one request: the server's, overridden by x-sim-* headers when those are honoured. */
export function planFor(req: http.IncomingMessage, o: EngineSimOptions): Plan {
  const p: Plan = {
    ttftMs: o.ttftMs,
    itlMs: o.itlMs,
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
