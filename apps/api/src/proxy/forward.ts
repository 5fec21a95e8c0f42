// Forwards one request upstream with undici and streams the answer back. Where each attempt goes is
// the upstream lease's business (../upstream/); retries happen only before the first byte reaches
// the client, and after it a failure becomes an SSE error frame. The signal aborts the upstream
// (client gone, key revoked, wall-clock limit).
import { finished } from 'node:stream';
import type { Response } from 'express';
import type { Dispatcher } from 'undici';
import { ApiError, errorFrame } from '../errors.ts';
import type { AddressSource } from '../upstream/types.ts';
import { SSE_HEADERS } from './heartbeat.ts';
import { SseUsageTap, usageOf, type Usage } from './sse.ts';

export interface ForwardRequest {
  /** Each attempt's OpenAI base URL (asked again on a retry). */
  upstream: AddressSource;
  method: 'GET' | 'POST';
  /** Path under the base URL, e.g. `/chat/completions`. */
  path: string;
  /** Parsed JSON body (POST). */
  body?: Record<string, unknown>;
  requestId: string;
  signal: AbortSignal;
  /** Extra request headers (an external backend's `authorization`). */
  headers?: Record<string, string>;
  /** Rewrite the answer's `"model": from` to `to` (Olympus names the catalog model it chose). */
  renameModel?: { from: string; to: string };
}

export interface ForwardDeps {
  dispatcher: Dispatcher;
  retries: number;
  retryDelayMs?: number;
}

const RETRIABLE = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'EHOSTUNREACH',
]);
const MAX_ERROR_BODY = 64 * 1024;

function errorCode(err: unknown): string | undefined {
  const e = err as { code?: string; cause?: { code?: string } };
  return e.code ?? e.cause?.code;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
  });
}

/** An upstream error status and body, in our error contract. */
export function upstreamError(status: number, text: string): ApiError {
  let message: string | undefined;
  let param: string | null = null;
  try {
    const body = JSON.parse(text) as {
      error?: { message?: unknown; param?: unknown } | string;
      message?: unknown;
    };
    const m = typeof body.error === 'object' ? body.error?.message : (body.message ?? body.error);
    if (typeof m === 'string' && m) message = m;
    // The field the engine blames (e.g. "model", "max_tokens"): the same name in the caller's body.
    if (typeof body.error === 'object' && typeof body.error?.param === 'string') param = body.error.param;
  } catch {
    // not JSON
  }
  if (status === 503 || status === 429)
    return new ApiError(status === 429 ? 'rate_limited' : 'service_unavailable');
  if (status >= 500) return new ApiError('engine_unreachable');
  return new ApiError('engine_error', {
    status,
    message: message ?? `The inference engine answered ${status}`,
    param,
  });
}

async function connect(
  req: ForwardRequest,
  deps: ForwardDeps,
  body: string | undefined,
): Promise<Dispatcher.ResponseData> {
  const delay = deps.retryDelayMs ?? 100;
  for (let attempt = 0; ; attempt++) {
    const base = req.upstream.next();
    if (!base) throw new ApiError('endpoint_unavailable', { headers: { 'retry-after': '5' } });
    // `http://host:port/v1` → origin `http://host:port`, path `/v1` + the request's.
    const cut = base.indexOf('/', base.indexOf('//') + 2);
    const origin = cut === -1 ? base : base.slice(0, cut);
    const path = cut === -1 ? req.path : base.slice(cut) + req.path;
    const last = attempt >= deps.retries;
    try {
      const res = await deps.dispatcher.request({
        origin,
        path,
        method: req.method,
        headers: {
          'content-type': 'application/json',
          accept: req.body?.stream ? 'text/event-stream' : 'application/json',
          'x-request-id': req.requestId,
          ...req.headers,
        },
        body,
        signal: req.signal,
        // The wall-clock limit bounds the whole call; a long non-streamed generation sends its
        // headers only at the end.
        headersTimeout: 0,
        bodyTimeout: 0,
      });
      if ((res.statusCode === 502 || res.statusCode === 503) && !last) {
        await res.body.dump();
        await sleep(delay * 2 ** attempt, req.signal);
        continue;
      }
      return res;
    } catch (err) {
      if (req.signal.aborted) throw req.signal.reason ?? err;
      if (last || !RETRIABLE.has(errorCode(err) ?? '')) throw new ApiError('engine_unreachable');
      await sleep(delay * 2 ** attempt, req.signal);
    }
  }
}

async function readCapped(body: Dispatcher.ResponseData['body']): Promise<string> {
  let text = '';
  for await (const chunk of body) {
    if (text.length < MAX_ERROR_BODY) text += (chunk as Buffer).toString('utf8');
  }
  return text.slice(0, MAX_ERROR_BODY);
}

/**
 * Copies the engine's SSE body to the client through the usage tap, chunk by chunk as it arrives.
 * Flowing mode ('data' events) rather than `for await`: one callback per chunk instead of a promise
 * and a microtask, on the path every token takes. Backpressure: the engine's body is paused until
 * the client drains. Rejects on an upstream error, or with the signal's reason when it aborts.
 */
function relay(
  body: Dispatcher.ResponseData['body'],
  res: Response,
  tap: SseUsageTap,
  signal: AbortSignal,
  rename?: (b: Buffer) => Buffer,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const done = (err?: unknown) => {
      body.off('data', onData);
      res.off('drain', onDrain);
      signal.removeEventListener('abort', onAbort);
      if (err === undefined) resolve();
      else reject(err);
    };
    const onData = (chunk: Buffer) => {
      const tapped = tap.push(chunk);
      const out = rename ? rename(tapped) : tapped;
      if (out.length && !res.write(out)) {
        body.pause();
        res.once('drain', onDrain);
      }
    };
    const onDrain = () => body.resume();
    const onAbort = () => done(signal.reason);
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    // End, error or premature close, as `for await` would see them. finished() leaves its 'error'
    // listener on, so an error after we stop listening is not an uncaught exception.
    finished(body, { writable: false }, (err) =>
      done(err ? (signal.aborted ? signal.reason : err) : undefined),
    );
    body.on('data', onData);
  });
}

/** Rewrites `"model":"<from>"` members (either JSON spacing) in complete JSON text or SSE events. */
function modelRenamer(r: { from: string; to: string }): (b: Buffer) => Buffer {
  const from = JSON.stringify(r.from);
  const to = `"model":${JSON.stringify(r.to)}`;
  const patterns = [`"model":${from}`, `"model": ${from}`];
  return (b) => {
    if (b.length === 0) return b;
    const text = b.toString('utf8');
    let out = text;
    for (const p of patterns) out = out.replaceAll(p, to);
    return out === text ? b : Buffer.from(out, 'utf8');
  };
}

// The Content-Type Express's res.type() makes of an engine's (`application/json` → with
// `; charset=utf-8`), remembered: the engines send one or two distinct values.
const contentTypes = new Map<string, string>();

/**
 * `res.status(status).type(contentType).send(buf)` for the common answer (a 200 to a GET or POST
 * without conditional headers) without Express's per-call header handling: the same status, headers
 * and body. Anything else goes to Express as it is.
 */
function send(res: Response, status: number, contentType: string, buf: Buffer): void {
  const type = contentTypes.get(contentType);
  const r = res.req;
  if (
    status !== 200 ||
    type === undefined ||
    r.method === 'HEAD' ||
    // Express's freshness check (a GET with If-None-Match: * becomes a 304)
    r.headers['if-none-match'] !== undefined ||
    r.headers['if-modified-since'] !== undefined ||
    res.getHeader('content-type') !== undefined
  ) {
    res.status(status).type(contentType).send(buf);
    if (type === undefined && contentTypes.size < 16) {
      const made = res.getHeader('content-type');
      if (typeof made === 'string') contentTypes.set(contentType, made);
    }
    return;
  }
  res.statusCode = 200;
  res.setHeader('Content-Type', type);
  res.setHeader('Content-Length', buf.length);
  res.end(buf);
}

/**
 * One non-streamed call read whole (a managed tool loop's model step): the parsed JSON answer.
 * The same connection and retry rules as forward(); nothing is written anywhere.
 */
export async function forwardJson(req: ForwardRequest, deps: ForwardDeps): Promise<Record<string, unknown>> {
  const upstream = await connect(req, deps, JSON.stringify(req.body ?? {}));
  if (upstream.statusCode >= 400) throw upstreamError(upstream.statusCode, await readCapped(upstream.body));
  const text = await upstream.body.text();
  let body: unknown;
  try {
    body = JSON.parse(req.renameModel ? modelRenamer(req.renameModel)(Buffer.from(text)).toString() : text);
  } catch {
    body = undefined;
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new ApiError('engine_unreachable');
  return body as Record<string, unknown>;
}

/**
 * Forwards and writes the answer to `res`. Resolves with the usage the engine reported (if any)
 * once the answer is complete. Throws an ApiError only while nothing has been sent yet.
 */
export async function forward(
  req: ForwardRequest,
  res: Response,
  deps: ForwardDeps,
): Promise<Usage | undefined> {
  let requestBody = req.body;
  const tapOptions = { stripFinal: false, stripContinuous: false };
  if (requestBody?.stream === true && req.path !== '/responses') {
    // Ask for usage on every chunk on the client's behalf (to meter the call, even one cut short)
    // and remove what it did not ask for on the way back (./sse.ts).
    const opts = requestBody.stream_options as
      { include_usage?: unknown; continuous_usage_stats?: unknown } | undefined;
    tapOptions.stripFinal = opts?.include_usage !== true;
    tapOptions.stripContinuous = opts?.continuous_usage_stats !== true;
    requestBody = {
      ...requestBody,
      stream_options: { ...(opts ?? {}), include_usage: true, continuous_usage_stats: true },
    };
  }
  const upstream = await connect(req, deps, requestBody ? JSON.stringify(requestBody) : undefined);
  if (upstream.statusCode >= 400) throw upstreamError(upstream.statusCode, await readCapped(upstream.body));

  const contentType = String(upstream.headers['content-type'] ?? 'application/json');
  if (!contentType.startsWith('text/event-stream')) {
    let buf: Buffer = Buffer.from(await upstream.body.arrayBuffer());
    if (req.renameModel) buf = modelRenamer(req.renameModel)(buf);
    send(res, upstream.statusCode, contentType, buf);
    try {
      return usageOf(JSON.parse(buf.toString('utf8')));
    } catch {
      return undefined;
    }
  }

  // Already sent when the request was held with heartbeats (./heartbeat.ts).
  if (!res.headersSent) {
    res.status(upstream.statusCode);
    for (const [name, value] of Object.entries(SSE_HEADERS)) res.setHeader(name, value);
    res.flushHeaders();
  }
  const tap = new SseUsageTap(tapOptions);
  const rename = req.renameModel && modelRenamer(req.renameModel);
  try {
    await relay(upstream.body, res, tap, req.signal, rename);
    const rest = rename ? rename(tap.end()) : tap.end();
    if (rest.length) res.write(rest);
    res.end();
    return tap.usage;
  } catch (err) {
    upstream.body.destroy();
    if (!res.writableEnded && !res.destroyed) {
      const reason =
        err instanceof ApiError
          ? err
          : req.signal.reason instanceof ApiError
            ? req.signal.reason
            : new ApiError('engine_unreachable');
      res.end(errorFrame(reason) + 'data: [DONE]\n\n');
    }
    return tap.usage;
  }
}
