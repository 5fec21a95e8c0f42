// The HTTP side of the simulator: vLLM's OpenAI routes on node:http, a FIFO scheduler bounded by
// --max-num-seqs, one timer per running request, and a draining shutdown.

import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { EngineSimOptions } from './config.ts';
import {
  badRequest,
  cudaOomMessage,
  errorBody,
  gatedRepoMessage,
  injectedFailure,
  maxTokensTooLarge,
  modelNotFound,
  notReady,
  promptTooLong,
  shuttingDown,
  validationError,
  vllmLogLine,
  type VllmError,
} from './errors.ts';
import { EngineMetrics, type FinishedReason } from './metrics.ts';
import {
  chatPrompt,
  completionPrompt,
  seedFor,
  TokenGenerator,
  generateText,
  type PromptInfo,
} from './text.ts';

const MAX_BODY_BYTES = 16 * 1024 * 1024;
/** Tokens written per write() when inter-token latency is 0, so other streams get the event loop. */
const ZERO_ITL_BATCH = 256;
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

type Kind = 'chat' | 'completion';

interface Plan {
  ttftMs: number;
  itlMs: number;
  failStatus: number | null;
  hang: boolean;
  stallAfter: number | null;
  errorAfter: number | null;
}

interface Job {
  kind: Kind;
  res: http.ServerResponse;
  stream: boolean;
  includeUsage: boolean;
  id: string;
  created: number;
  prompt: PromptInfo;
  outputTokens: number;
  finishReason: 'stop' | 'length';
  seed: number;
  plan: Plan;
  arrivedAt: number;
  // run state
  state: 'queued' | 'running' | 'done';
  timer: NodeJS.Timeout | null;
  emitted: number;
  firstTokenAt: number;
  lastTokenAt: number;
  gen: TokenGenerator | null;
  chunkPrefix: string;
  chunkSuffix: string;
  paused: boolean;
}

export interface EngineSimHandle {
  url: string;
  host: string;
  port: number;
  /** Resolves when the model is "loaded" (/health turns 200); rejects with StartupError on a start-up failure. */
  ready: Promise<void>;
  isReady(): boolean;
  metrics: EngineMetrics;
  /** Stop accepting, let in-flight requests finish within the grace period, then cut the rest. */
  close(graceMs?: number): Promise<void>;
}

export interface ServeOptions {
  /** vLLM-style log lines (default: none). */
  log?: (line: string) => void;
  /** Hugging Face token the "download" sees; defaults to HF_TOKEN / HUGGING_FACE_HUB_TOKEN. */
  hfToken?: string | undefined;
}

function headerInt(req: http.IncomingMessage, name: string): number | null {
  const v = req.headers[name];
  if (typeof v !== 'string' || !/^\d+$/.test(v.trim())) return null;
  return Number(v.trim());
}

function sendJson(
  res: http.ServerResponse,
  status: number,
  body: string,
  extra?: http.OutgoingHttpHeaders,
): void {
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    ...extra,
  });
  res.end(body);
}

function sendError(res: http.ServerResponse, e: VllmError, extra?: http.OutgoingHttpHeaders): void {
  sendJson(res, e.status, errorBody(e), extra);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

// pydantic-style validation messages, as vLLM's RequestValidationError handler passes them through.
function fieldError(type: string, loc: string, msg: string): VllmError {
  return validationError(`[{'type': '${type}', 'loc': ('body', '${loc}'), 'msg': '${msg}'}]`, null);
}

function optionalInt(body: Record<string, unknown>, key: string): number | null | VllmError {
  const v = body[key];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isInteger(v))
    return fieldError('int_type', key, 'Input should be a valid integer');
  return v;
}

export async function serve(o: EngineSimOptions, serveOptions: ServeOptions = {}): Promise<EngineSimHandle> {
  const log = serveOptions.log ?? (() => {});
  const modelName = o.servedModelNames[0]!;
  const modelJson = JSON.stringify(modelName);
  const served = new Set(o.servedModelNames);
  const metrics = new EngineMetrics(modelName, o.maxNumSeqs);
  const startedAt = Math.floor(Date.now() / 1000);

  let loaded = false;
  let draining = false;
  const queue: Job[] = [];
  let queueHead = 0;
  const active = new Set<Job>(); // queued + running
  const hung = new Set<http.ServerResponse>();
  let idleWaiter: (() => void) | null = null;

  const checkIdle = () => {
    if (idleWaiter && active.size === 0 && hung.size === 0) idleWaiter();
  };

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

  // --- scheduling ---

  function enqueue(job: Job): void {
    active.add(job);
    if (metrics.running < o.maxNumSeqs && metrics.waiting === 0) start(job);
    else {
      queue.push(job);
      metrics.waiting++;
    }
  }

  function release(): void {
    metrics.running--;
    while (metrics.running < o.maxNumSeqs && queueHead < queue.length) {
      const next = queue[queueHead]!;
      queue[queueHead++] = undefined as unknown as Job;
      if (next.state !== 'queued') continue; // cancelled while waiting; already uncounted
      metrics.waiting--;
      start(next);
    }
    if (queueHead > 1024 && queueHead * 2 > queue.length) {
      queue.splice(0, queueHead);
      queueHead = 0;
    }
  }

  function start(job: Job): void {
    job.state = 'running';
    metrics.running++;
    metrics.promptTokens += job.prompt.tokens;
    const { ttftMs, itlMs } = job.plan;
    if (job.stream) {
      job.timer = setTimeout(onFirstToken, ttftMs, job);
    } else {
      job.timer = setTimeout(finishNonStreaming, ttftMs + itlMs * (job.outputTokens - 1), job);
    }
  }

  function finish(job: Job, reason: FinishedReason): void {
    if (job.state === 'done') return;
    const wasRunning = job.state === 'running';
    if (job.state === 'queued') metrics.waiting--;
    job.state = 'done';
    if (job.timer) {
      clearTimeout(job.timer);
      job.timer = null;
    }
    active.delete(job);
    metrics.finish(reason);
    if (reason === 'stop' || reason === 'length')
      metrics.e2e.observe((performance.now() - job.arrivedAt) / 1000);
    if (wasRunning) release();
    checkIdle();
  }

  // --- streaming ---

  function onFirstToken(job: Job): void {
    job.timer = null;
    const now = performance.now();
    job.firstTokenAt = now;
    job.lastTokenAt = now;
    metrics.ttft.observe((now - job.arrivedAt) / 1000);
    job.gen = new TokenGenerator(job.seed);
    const head = `data: {"id":"${job.id}","object":"${job.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion'}","created":${job.created},"model":${modelJson},"choices":[{"index":0,`;
    if (job.kind === 'chat') {
      job.chunkPrefix = head + '"delta":{"content":"';
      job.chunkSuffix = '"},"logprobs":null,"finish_reason":null}]}\n\n';
      job.res.write(
        head + '"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n',
      );
    } else {
      job.chunkPrefix = head + '"text":"';
      job.chunkSuffix = '","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n';
    }
    pump(job);
    if (job.state === 'running' && job.plan.itlMs > 0 && !stalled(job) && job.timer === null)
      job.timer = setInterval(pump, job.plan.itlMs, job);
  }

  function stalled(job: Job): boolean {
    return job.plan.stallAfter !== null && job.emitted >= job.plan.stallAfter;
  }

  function pump(job: Job): void {
    if (job.state !== 'running' || job.paused) return;
    const { itlMs, stallAfter, errorAfter } = job.plan;
    const now = performance.now();
    let limit = job.outputTokens;
    if (stallAfter !== null && stallAfter < limit) limit = stallAfter;
    if (errorAfter !== null && errorAfter < limit) limit = errorAfter;
    let due: number;
    if (itlMs === 0) due = Math.min(limit, job.emitted + ZERO_ITL_BATCH);
    else due = Math.min(limit, Math.floor((now - job.firstTokenAt) / itlMs) + 1);
    if (due <= job.emitted) {
      if (errorAfter !== null && job.emitted >= errorAfter) failMidStream(job, '');
      return; // not due yet, or stalled
    }

    let out = '';
    const gen = job.gen!;
    const last = job.outputTokens - 1;
    for (let i = job.emitted; i < due; i++) {
      const tok = gen.next();
      if (i === last) out += finalChunk(job, tok);
      else out += job.chunkPrefix + tok + job.chunkSuffix;
    }
    const n = due - job.emitted;
    if (n > 0) {
      if (job.emitted > 0) metrics.itl.observe((now - job.lastTokenAt) / 1000);
      for (let i = 1; i < n; i++) metrics.itl.observe(0);
      job.lastTokenAt = now;
      job.emitted = due;
      metrics.generationTokens += n;
    }

    if (job.emitted === job.outputTokens) {
      if (job.includeUsage) out += usageChunk(job);
      out += 'data: [DONE]\n\n';
      job.res.end(out);
      finish(job, job.finishReason);
      return;
    }
    if (errorAfter !== null && job.emitted >= errorAfter) return failMidStream(job, out);
    const ok = out.length > 0 ? job.res.write(out) : true;
    if (stallAfter !== null && job.emitted >= stallAfter) {
      // Go silent with the connection open and the slot held, like a wedged sequence.
      if (job.timer) clearInterval(job.timer);
      job.timer = null;
      return;
    }
    if (!ok) {
      job.paused = true;
      job.res.once('drain', () => {
        job.paused = false;
        if (itlMs === 0) pump(job);
      });
    } else if (itlMs === 0) {
      setImmediate(pump, job); // harmless if the job ends first: pump() checks the state
    }
  }

  // vLLM reports an error after the first byte as one `data: {"error": ...}` frame, then `[DONE]`.
  function failMidStream(job: Job, out: string): void {
    const e = injectedFailure(job.plan.failStatus ?? 500);
    job.res.end(out + `data: ${errorBody(e)}\n\ndata: [DONE]\n\n`);
    finish(job, 'error');
  }

  function finalChunk(job: Job, tok: string): string {
    if (job.kind === 'chat')
      return (
        job.chunkPrefix +
        tok +
        `"},"logprobs":null,"finish_reason":"${job.finishReason}","stop_reason":null}]}\n\n`
      );
    return (
      job.chunkPrefix +
      tok +
      `","logprobs":null,"finish_reason":"${job.finishReason}","stop_reason":null}]}\n\n`
    );
  }

  function usageJson(job: Job): string {
    const p = job.prompt.tokens;
    const c = job.outputTokens;
    return `{"prompt_tokens":${p},"total_tokens":${p + c},"completion_tokens":${c}}`;
  }

  function usageChunk(job: Job): string {
    const object = job.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    return `data: {"id":"${job.id}","object":"${object}","created":${job.created},"model":${modelJson},"choices":[],"usage":${usageJson(job)}}\n\n`;
  }

  // --- non-streaming ---

  function finishNonStreaming(job: Job): void {
    job.timer = null;
    if (job.plan.stallAfter !== null) return; // never answers; holds its slot until the client leaves
    if (job.plan.errorAfter !== null) {
      sendError(job.res, injectedFailure(job.plan.failStatus ?? 500));
      return finish(job, 'error');
    }
    const now = performance.now();
    const ttft = (now - job.arrivedAt - job.plan.itlMs * (job.outputTokens - 1)) / 1000;
    metrics.ttft.observe(Math.max(0, ttft));
    for (let i = 1; i < job.outputTokens; i++) metrics.itl.observe(job.plan.itlMs / 1000);
    metrics.generationTokens += job.outputTokens;
    const text = JSON.stringify(generateText(job.seed, job.outputTokens));
    const p = job.prompt.tokens;
    const c = job.outputTokens;
    const usage = `{"prompt_tokens":${p},"total_tokens":${p + c},"completion_tokens":${c},"prompt_tokens_details":null}`;
    let body: string;
    if (job.kind === 'chat') {
      body =
        `{"id":"${job.id}","object":"chat.completion","created":${job.created},"model":${modelJson},` +
        `"choices":[{"index":0,"message":{"role":"assistant","content":${text},"refusal":null,"annotations":null,` +
        `"audio":null,"function_call":null,"reasoning":null},"logprobs":null,"finish_reason":"${job.finishReason}",` +
        `"stop_reason":null,"token_ids":null}],"service_tier":null,"system_fingerprint":null,"usage":${usage},` +
        `"prompt_logprobs":null,"prompt_token_ids":null,"kv_transfer_params":null}`;
    } else {
      body =
        `{"id":"${job.id}","object":"text_completion","created":${job.created},"model":${modelJson},` +
        `"choices":[{"index":0,"text":${text},"logprobs":null,"finish_reason":"${job.finishReason}",` +
        `"stop_reason":null,"token_ids":null,"prompt_logprobs":null,"prompt_token_ids":null}],` +
        `"service_tier":null,"system_fingerprint":null,"usage":${usage},"kv_transfer_params":null}`;
    }
    sendJson(job.res, 200, body);
    finish(job, job.finishReason);
  }

  // --- request handling ---

  function plan(req: http.IncomingMessage): Plan {
    const p: Plan = {
      ttftMs: o.ttftMs,
      itlMs: o.itlMs,
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

  function handleGeneration(
    kind: Kind,
    req: http.IncomingMessage,
    res: http.ServerResponse,
    raw: Buffer,
  ): void {
    const arrivedAt = performance.now();
    let body: unknown;
    try {
      body = JSON.parse(raw.toString('utf8'));
    } catch (err) {
      return sendError(
        res,
        validationError(
          `[{'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': '${(err as Error).message.replace(/'/g, '"')}'}}]`,
        ),
      );
    }
    if (!isObject(body))
      return sendError(
        res,
        fieldError(
          'model_attributes_type',
          '',
          'Input should be a valid dictionary or object to extract fields from',
        ),
      );

    let prompt: PromptInfo;
    if (kind === 'chat') {
      const messages = body.messages;
      if (messages === undefined) return sendError(res, fieldError('missing', 'messages', 'Field required'));
      if (!Array.isArray(messages))
        return sendError(res, fieldError('list_type', 'messages', 'Input should be a valid list'));
      if (!messages.every(isObject))
        return sendError(res, fieldError('model_type', 'messages', 'Input should be an object'));
      prompt = chatPrompt(messages);
    } else {
      const p = body.prompt;
      if (p === undefined || p === null)
        return sendError(res, fieldError('missing', 'prompt', 'Field required'));
      if (typeof p === 'string') prompt = completionPrompt(p);
      else if (Array.isArray(p) && p.length > 0 && p.every((t) => typeof t === 'number'))
        prompt = { tokens: p.length, text: p.join(' ') };
      else if (Array.isArray(p) && p.length === 1 && typeof p[0] === 'string')
        prompt = completionPrompt(p[0]);
      else
        return sendError(
          res,
          badRequest('engine-sim supports one prompt (a string or token ids) per request.', 'prompt'),
        );
    }

    const model = body.model;
    if (model !== undefined && model !== null && (typeof model !== 'string' || !served.has(model)))
      return sendError(res, modelNotFound(String(model)));

    const maxTokensV = optionalInt(body, 'max_tokens');
    if (typeof maxTokensV === 'object' && maxTokensV !== null) return sendError(res, maxTokensV);
    const maxCompletionV = kind === 'chat' ? optionalInt(body, 'max_completion_tokens') : null;
    if (typeof maxCompletionV === 'object' && maxCompletionV !== null) return sendError(res, maxCompletionV);
    const seedV = optionalInt(body, 'seed');
    if (typeof seedV === 'object' && seedV !== null) return sendError(res, seedV);
    const maxTokens = (maxCompletionV as number | null) ?? (maxTokensV as number | null);
    if (maxTokens !== null && maxTokens < 1)
      return sendError(res, badRequest(`max_tokens must be at least 1, got ${maxTokens}.`, 'max_tokens'));

    if (prompt.tokens >= o.maxModelLen) return sendError(res, promptTooLong(o.maxModelLen, prompt.tokens));
    if (maxTokens !== null && prompt.tokens + maxTokens > o.maxModelLen)
      return sendError(res, maxTokensTooLarge(o.maxModelLen, prompt.tokens, maxTokens));

    const p = plan(req);
    if (p.failStatus !== null && p.errorAfter === null) return sendError(res, injectedFailure(p.failStatus));
    if (p.hang) {
      hung.add(res);
      res.on('close', () => {
        hung.delete(res);
        checkIdle();
      });
      return;
    }

    // Output length: the model's "natural" length unless max_tokens cuts it short (finish_reason
    // "length"); `ignore_eos` (vLLM's benchmark switch) generates exactly max_tokens.
    let natural = o.outputTokens;
    const override = o.simHeaders ? headerInt(req, 'x-sim-output-tokens') : null;
    if (override !== null && override > 0) natural = override;
    if (body.ignore_eos === true && maxTokens !== null) natural = maxTokens;
    natural = Math.min(natural, o.maxModelLen - prompt.tokens);
    const outputTokens = maxTokens !== null ? Math.min(maxTokens, natural) : natural;
    const finishReason =
      maxTokens !== null && outputTokens >= maxTokens ? 'length' : outputTokens < natural ? 'length' : 'stop';

    const stream = body.stream === true;
    const so = body.stream_options;
    const includeUsage = stream && isObject(so) && so.include_usage === true;
    const job: Job = {
      kind,
      res,
      stream,
      includeUsage,
      id: (kind === 'chat' ? 'chatcmpl-' : 'cmpl-') + randomUUID().replaceAll('-', ''),
      created: Math.floor(Date.now() / 1000),
      prompt,
      outputTokens,
      finishReason,
      seed: seedFor(prompt.text, seedV as number | null),
      plan: p,
      arrivedAt,
      state: 'queued',
      timer: null,
      emitted: 0,
      firstTokenAt: 0,
      lastTokenAt: 0,
      gen: null,
      chunkPrefix: '',
      chunkSuffix: '',
      paused: false,
    };
    if (stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
      res.flushHeaders();
    }
    res.on('close', () => {
      if (job.state !== 'done') finish(job, 'abort');
    });
    enqueue(job);
  }

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
          const text = metrics.render();
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
      case '/v1/completions': {
        if (method !== 'POST') return methodNotAllowed(res);
        if (!loaded) return sendError(res, notReady());
        const kind: Kind = path === '/v1/chat/completions' ? 'chat' : 'completion';
        const chunks: Buffer[] = [];
        let size = 0;
        let tooLarge = false;
        req.on('data', (c: Buffer) => {
          size += c.length;
          if (size > MAX_BODY_BYTES) tooLarge = true;
          else chunks.push(c);
        });
        req.on('end', () => {
          if (tooLarge)
            return sendError(res, {
              status: 413,
              type: 'Request Entity Too Large',
              message: 'Request body too large',
              param: null,
            });
          handleGeneration(kind, req, res, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
        });
        return;
      }
      default:
        return sendJson(res, 404, '{"detail":"Not Found"}');
    }
  }

  function methodNotAllowed(res: http.ServerResponse): void {
    sendJson(res, 405, '{"detail":"Method Not Allowed"}');
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

  let startupTimer: NodeJS.Timeout | null = null;
  const ready = new Promise<void>((resolve, reject) => {
    startupTimer = setTimeout(() => {
      startupTimer = null;
      const hfToken =
        'hfToken' in serveOptions
          ? serveOptions.hfToken
          : (process.env.HF_TOKEN ?? process.env.HUGGING_FACE_HUB_TOKEN);
      let failure: StartupError | null = null;
      if (o.failStartup === 'oom') failure = new StartupError('oom', cudaOomMessage());
      else if (o.failStartup === 'gated' || (o.requireHfToken !== null && hfToken !== o.requireHfToken))
        failure = new StartupError('gated', gatedRepoMessage(o.model));
      if (failure) {
        server.close();
        server.closeAllConnections();
        return reject(failure);
      }
      loaded = true;
      log(
        vllmLogLine(
          'INFO',
          'launcher.py:29',
          'Available routes are: /health, /metrics, /version, /v1/models, /v1/chat/completions, /v1/completions',
        ),
      );
      log('INFO:     Application startup complete.\n');
      resolve();
    }, o.startupDelayMs);
  });
  ready.catch(() => {}); // callers that never await `ready` must not see an unhandled rejection

  let closing: Promise<void> | null = null;
  function close(graceMs = o.shutdownGraceMs): Promise<void> {
    if (closing) return closing;
    draining = true;
    if (startupTimer) clearTimeout(startupTimer);
    closing = (async () => {
      const closed = new Promise<void>((r) => server.close(() => r()));
      server.closeIdleConnections();
      if (active.size > 0 || hung.size > 0) {
        let graceTimer: NodeJS.Timeout | undefined;
        await Promise.race([
          new Promise<void>((r) => (idleWaiter = r)),
          new Promise<void>((r) => (graceTimer = setTimeout(r, graceMs))),
        ]);
        clearTimeout(graceTimer);
      }
      for (const job of [...active]) finish(job, 'abort');
      server.closeAllConnections();
      await closed;
    })();
    return closing;
  }

  return { url, host: addr.address, port: addr.port, ready, isReady: () => loaded, metrics, close };
}
