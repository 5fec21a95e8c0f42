// Forwards one request upstream with undici and streams the answer back. Where each attempt goes is
// the upstream lease's business (../upstream/); retries happen only before the first byte reaches
// the client, and after it a failure becomes an SSE error frame. The signal aborts the upstream
// (client gone, key revoked, wall-clock limit).
import { finished, type Readable } from 'node:stream';
import type { Response } from 'express';
import type { Dispatcher } from 'undici';
import { ApiError, errorFrame } from '../../platform/errors.ts';
import { bodyBytes, bodyBytesWith } from '../../http/body-bytes.ts';
import { traceHeaders, tracing, type Context, type TraceSpan } from '../../platform/tracing.ts';
import type { AddressSource } from '../upstream/types.ts';
import { SSE_HEADERS } from './heartbeat.ts';
import { SseUsageTap, usageOfAnswer, type Usage } from './sse.ts';
import { dispatchCall, type UpstreamAnswer } from './upstream-answer.ts';

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
  /** Called as the answer's first byte goes to the client (a call held through a wake: its receipt). */
  onFirstByte?: () => void;
  /** The call's trace (platform/tracing.ts): each attempt is a span, and the engine gets its traceparent. */
  trace?: Context;
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
/** `stream_options` asking for usage on every chunk, as a member appended to a body's bytes. */
const USAGE_MEMBER = Buffer.from(',"stream_options":{"include_usage":true,"continuous_usage_stats":true}');

function errorCode(err: unknown): string | undefined {
  const e = err as { code?: string; cause?: { code?: string } };
  return e.code ?? e.cause?.code;
}

/** Waits `ms`, or until the signal aborts (at once if it has); the listener goes with the wait. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const onAbort = () => (clearTimeout(t), resolve());
    const t = setTimeout(() => (signal.removeEventListener('abort', onAbort), resolve()), ms);
    signal.addEventListener('abort', onAbort, { once: true });
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
  body: string | Buffer | undefined,
): Promise<UpstreamAnswer> {
  const delay = deps.retryDelayMs ?? 100;
  for (let attempt = 0; ; attempt++) {
    const base = req.upstream.next();
    if (!base) throw new ApiError('endpoint_unavailable', { headers: { 'retry-after': '5' } });
    // `http://host:port/v1` → origin `http://host:port`, path `/v1` + the request's.
    const cut = base.indexOf('/', base.indexOf('//') + 2);
    const origin = cut === -1 ? base : base.slice(0, cut);
    const path = cut === -1 ? req.path : base.slice(cut) + req.path;
    const last = attempt >= deps.retries;
    const span = req.trace && tracing.enabled ? attemptSpan(req, req.trace, origin, attempt) : undefined;
    try {
      const res = await dispatchCall(
        deps.dispatcher,
        {
          origin,
          path,
          method: req.method,
          headers: {
            'content-type': 'application/json',
            accept: req.body?.stream ? 'text/event-stream' : 'application/json',
            'x-request-id': req.requestId,
            ...req.headers,
            ...(req.trace && traceHeaders(span ? span.context : req.trace)),
          },
          body,
          // The wall-clock limit bounds the whole call; a long non-streamed generation sends its
          // headers only at the end.
          headersTimeout: 0,
          bodyTimeout: 0,
        },
        req.signal,
      );
      if (span) endWithAnswer(span, res);
      if ((res.statusCode === 502 || res.statusCode === 503) && !last) {
        await res.dump();
        await sleep(delay * 2 ** attempt, req.signal);
        continue;
      }
      return res;
    } catch (err) {
      span?.end(req.signal.aborted ? (req.signal.reason ?? err) : { code: errorCode(err) ?? 'error' });
      if (req.signal.aborted) throw req.signal.reason ?? err;
      if (last || !RETRIABLE.has(errorCode(err) ?? '')) throw new ApiError('engine_unreachable');
      await sleep(delay * 2 ** attempt, req.signal);
    }
  }
}

/** An attempt's client span (OpenTelemetry's HTTP client conventions); never the body or the key. */
function attemptSpan(req: ForwardRequest, parent: Context, origin: string, attempt: number): TraceSpan {
  const url = new URL(origin);
  return tracing.span(
    `${req.method} ${req.path}`,
    parent,
    {
      'http.request.method': req.method,
      'server.address': url.hostname,
      'server.port': Number(url.port) || (url.protocol === 'https:' ? 443 : 80),
      'url.path': req.path,
      'http.request.resend_count': attempt,
      'berth.retry': attempt,
    },
    'client',
  );
}

/** Ends an attempt's span with its status once the answer's body is read (or dropped). */
function endWithAnswer(span: TraceSpan, res: UpstreamAnswer): void {
  const status = res.statusCode;
  span.set({ 'http.response.status_code': status });
  res.whenDone(() => span.end(status >= 400 ? { code: String(status) } : undefined));
}

/** An error answer's text, at most MAX_ERROR_BODY bytes of it (the rest is read and dropped). */
async function readCapped(res: UpstreamAnswer): Promise<string> {
  return (await res.read(MAX_ERROR_BODY)).toString('utf8');
}

/**
 * Copies the engine's SSE body to the client through the usage tap, chunk by chunk as it arrives.
 * Flowing mode ('data' events) rather than `for await`: one callback per chunk instead of a promise
 * and a microtask, on the path every token takes. Backpressure: the engine's body is paused until
 * the client drains. Rejects on an upstream error, or with the signal's reason when it aborts.
 */
function relay(
  body: Readable,
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

/**
 * Rewrites `"model":"<from>"` members (either JSON spacing) in complete JSON text or SSE events, on
 * the bytes: a chunk without the member is passed on as it is, without being decoded.
 */
export function modelRenamer(r: { from: string; to: string }): (b: Buffer) => Buffer {
  const from = JSON.stringify(r.from);
  const to = Buffer.from(`"model":${JSON.stringify(r.to)}`);
  const patterns = [Buffer.from(`"model":${from}`), Buffer.from(`"model": ${from}`)];
  return (b) => {
    let parts: Buffer[] | undefined;
    let at = 0;
    for (;;) {
      let hit = -1;
      let len = 0;
      for (const p of patterns) {
        const i = b.indexOf(p, at);
        if (i !== -1 && (hit === -1 || i < hit)) {
          hit = i;
          len = p.length;
        }
      }
      if (hit === -1) break;
      (parts ??= []).push(b.subarray(at, hit), to);
      at = hit + len;
    }
    if (!parts) return b;
    parts.push(b.subarray(at));
    return Buffer.concat(parts);
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
  if (upstream.statusCode >= 400) throw upstreamError(upstream.statusCode, await readCapped(upstream));
  const buf = await upstream.read();
  let body: unknown;
  try {
    body = JSON.parse((req.renameModel ? modelRenamer(req.renameModel)(buf) : buf).toString('utf8'));
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
  const requestBody = req.body;
  // The bytes sent upstream: the client's own when the body goes on unchanged (or only gains
  // stream_options), serialised again only when it was rewritten (../../http/body-bytes.ts).
  let bytes: Buffer | string | undefined;
  const tapOptions = { stripFinal: false, stripContinuous: false };
  if (requestBody?.stream === true && req.path !== '/responses') {
    // Ask for usage on every chunk on the client's behalf (to meter the call, even one cut short)
    // and remove what it did not ask for on the way back (./sse.ts).
    const opts = requestBody.stream_options as
      { include_usage?: unknown; continuous_usage_stats?: unknown } | undefined;
    tapOptions.stripFinal = opts?.include_usage !== true;
    tapOptions.stripContinuous = opts?.continuous_usage_stats !== true;
    bytes =
      (opts === undefined ? bodyBytesWith(requestBody, 'stream_options', USAGE_MEMBER) : undefined) ??
      JSON.stringify({
        ...requestBody,
        stream_options: { ...(opts ?? {}), include_usage: true, continuous_usage_stats: true },
      });
  } else if (requestBody) bytes = bodyBytes(requestBody) ?? JSON.stringify(requestBody);
  const upstream = await connect(req, deps, bytes);
  if (upstream.statusCode >= 400) throw upstreamError(upstream.statusCode, await readCapped(upstream));

  const contentType = upstream.contentType ?? 'application/json';
  if (!contentType.startsWith('text/event-stream')) {
    let buf = await upstream.read();
    if (req.renameModel) buf = modelRenamer(req.renameModel)(buf);
    req.onFirstByte?.();
    send(res, upstream.statusCode, contentType, buf);
    return usageOfAnswer(buf);
  }

  // Already sent when the request was held with heartbeats (./heartbeat.ts).
  if (!res.headersSent) {
    res.status(upstream.statusCode);
    for (const [name, value] of Object.entries(SSE_HEADERS)) res.setHeader(name, value);
    res.flushHeaders();
  }
  const tap = new SseUsageTap(tapOptions);
  const rename = req.renameModel && modelRenamer(req.renameModel);
  const body = upstream.stream();
  // Before relay's own listener, so it runs as the first chunk is written (not on every chunk).
  if (req.onFirstByte) body.once('data', req.onFirstByte);
  try {
    await relay(body, res, tap, req.signal, rename);
    const rest = rename ? rename(tap.end()) : tap.end();
    if (rest.length) res.write(rest);
    res.end();
    return tap.usage;
  } catch (err) {
    body.destroy();
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
