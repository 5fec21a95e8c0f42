import { randomUUID } from 'node:crypto';
import express, { type ErrorRequestHandler, type RequestHandler } from 'express';
import type { Logger } from 'pino';
import { databaseUnavailable } from '../platform/db-unavailable.ts';
import { ApiError, errorBody, familyOf } from '../platform/errors.ts';
import type { ApiMetrics } from '../platform/metrics.ts';
import { keepBodyBytes } from './body-bytes.ts';

const SAFE_REQUEST_ID = /^[\w.:-]{1,128}$/;

/** Every response carries `x-request-id`: the caller's when it is a sane token, else a new one. */
export function requestId(): RequestHandler {
  return (req, res, next) => {
    const given = req.get('x-request-id');
    const id = given && SAFE_REQUEST_ID.test(given) ? given : randomUUID();
    res.locals.requestId = id;
    res.setHeader('x-request-id', id);
    next();
  };
}

/**
 * The headers of every page the API serves to browsers (the dashboard and its files, the development
 * identity provider's pages): a Content-Security-Policy that lets a page load, connect and submit
 * forms to its own origin only (no inline script, no plugin, no <base>), never framed
 * (`frame-ancestors 'none'`, and X-Frame-Options for browsers older than CSP 2), no MIME sniffing,
 * and no Referer beyond the origin. `styles`: extra style sources (a page's inline <style> by its
 * hash); `formAction`: extra origins a form may go to (its redirects count in Chromium).
 */
export function pageHeaders(
  extra: { styles?: readonly string[]; formAction?: readonly string[] } = {},
): RequestHandler {
  const policy = [
    "default-src 'self'",
    "script-src 'self'",
    ["style-src 'self'", ...(extra.styles ?? [])].join(' '),
    "img-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    ["form-action 'self'", ...(extra.formAction ?? [])].join(' '),
    "frame-ancestors 'none'",
  ].join('; ');
  return (_req, res, next) => {
    res.setHeader('content-security-policy', policy);
    res.setHeader('x-frame-options', 'DENY');
    res.setHeader('x-content-type-options', 'nosniff');
    res.setHeader('referrer-policy', 'same-origin');
    next();
  };
}

/** The matched route template, for metric labels and logs (never the raw path: it holds ids). */
export function routeTemplate(req: express.Request): string {
  const label = req.res?.locals.route as string | undefined;
  if (label) return label;
  const route = req.route as { path?: string } | undefined;
  return route?.path ? `${req.baseUrl}${route.path}` : 'unmatched';
}

/** When the access log started timing a response (absent once it was recorded). */
const STARTED = Symbol('access log start');
type Timed = express.Response & { [STARTED]?: bigint };

export function accessLog(logger: Logger, metrics: ApiMetrics): RequestHandler {
  // Shared by every response (`this` is the response): no closure per request.
  function record(res: Timed, closed: boolean) {
    const start = res[STARTED];
    if (start === undefined) return;
    res[STARTED] = undefined;
    const req = res.req;
    const route = routeTemplate(req);
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    const status = closed && !res.writableFinished ? 499 : res.statusCode;
    metrics.httpRequestCells.add(1, route, req.method, status);
    metrics.httpDuration.observe(seconds, route, req.method);
    if (route === '/metrics' || route === '/healthz' || route === '/readyz') return;
    if (!logger.isLevelEnabled('info')) return; // the line's object is not even built
    logger.info(
      {
        requestId: res.locals.requestId,
        method: req.method,
        route,
        status,
        ms: Math.round(seconds * 1e4) / 10,
        account: res.locals.principal?.accountId,
      },
      'request',
    );
  }
  function onFinish(this: Timed) {
    record(this, false);
  }
  function onClose(this: Timed) {
    record(this, true);
  }
  return (_req, res, next) => {
    (res as Timed)[STARTED] = process.hrtime.bigint();
    res.on('finish', onFinish);
    res.on('close', onClose);
    next();
  };
}

function hasBody(req: express.Request): boolean {
  const length = req.headers['content-length'];
  return (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined;
}

/**
 * JSON request bodies: 415 for another media type, 413 past the limit, 400 for malformed JSON.
 * A request without a body leaves `req.body` undefined for the route's schema to refuse.
 */
export function jsonBody(limitBytes: number): RequestHandler[] {
  const parse = express.json({ limit: limitBytes, type: () => true });
  return [
    (req, _res, next) => {
      if (!hasBody(req)) return next();
      if (!req.is('application/json')) return next(new ApiError('unsupported_media_type'));
      next();
    },
    (req, res, next) => (hasBody(req) ? parse(req, res, next) : next()),
  ];
}

/** Runs middleware in order, as a router would: resolves after the last one, rejects on an error. */
export function runHandlers(
  handlers: RequestHandler[],
  req: express.Request,
  res: express.Response,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let i = 0;
    const step = (err?: unknown): void => {
      if (err) return reject(err);
      const handler = handlers[i++];
      if (!handler) return resolve();
      try {
        const r = handler(req, res, step) as unknown;
        if (r instanceof Promise) r.catch(reject);
      } catch (e) {
        reject(e);
      }
    };
    step();
  });
}

const JSON_TYPES = new Set(['application/json', 'application/json; charset=utf-8']);
const LENGTH = /^[1-9][0-9]{0,14}$/;
const FIRST_CHAR = /^[\x20\x09\x0a\x0d]*([^\x20\x09\x0a\x0d])/;

/** body-parser's strict JSON parse (the same decoding, BOM and first-character rules). */
function parseJsonText(buf: Buffer): unknown {
  let text = buf.toString('utf8');
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  if (text.length === 0) return {};
  const c = text.charCodeAt(0);
  if (c !== 0x7b && c !== 0x5b) {
    const first = FIRST_CHAR.exec(text)?.[1];
    if (first !== '{' && first !== '[') throw new ApiError('invalid_json');
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new ApiError('invalid_json');
  }
}

/** A body being read by readJson(): on the request itself, so its listeners are shared. */
const READING = Symbol('json body read');
interface Reading {
  length: number;
  received: number;
  first: Buffer | undefined;
  chunks: Buffer[] | undefined;
  resolve: () => void;
  reject: (err: unknown) => void;
}
type Read = express.Request & { [READING]?: Reading };

function stopReading(req: Read): Reading | undefined {
  const r = req[READING];
  if (!r) return undefined;
  req[READING] = undefined;
  req.off('data', onBodyData);
  req.off('end', onBodyEnd);
  req.off('aborted', onBodyCut);
  req.off('close', onBodyCut);
  req.off('error', onBodyError);
  return r;
}
function onBodyData(this: Read, chunk: Buffer) {
  const r = this[READING]!;
  r.received += chunk.length;
  if (!r.first) r.first = chunk;
  else (r.chunks ??= [r.first]).push(chunk);
}
function onBodyEnd(this: Read) {
  const r = stopReading(this);
  if (!r) return;
  if (r.received !== r.length)
    return r.reject(new ApiError('invalid_json', { message: 'The request could not be read' }));
  try {
    const buf = r.chunks ? Buffer.concat(r.chunks, r.received) : r.first!;
    this.body = parseJsonText(buf);
    keepBodyBytes(this.body, buf);
    r.resolve();
  } catch (err) {
    r.reject(err);
  }
}
function onBodyCut(this: Read) {
  stopReading(this)?.reject(new ApiError('invalid_json', { message: 'Request body was cut short' }));
}
function onBodyError(this: Read) {
  stopReading(this)?.reject(new ApiError('invalid_json', { message: 'The request could not be read' }));
}

/** Reads a body of exactly `length` bytes into `req.body` as JSON. */
function readJson(req: Read, length: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    req[READING] = { length, received: 0, first: undefined, chunks: undefined, resolve, reject };
    req.on('data', onBodyData);
    req.on('end', onBodyEnd);
    req.on('aborted', onBodyCut);
    req.on('close', onBodyCut);
    req.on('error', onBodyError);
  });
}

/**
 * jsonBody() as one function, for a handler that runs without a router (the dedicated proxy's fast
 * path): the common body — a Content-Length of at most the limit, no Content-Encoding,
 * `application/json` (UTF-8) — is read and parsed here, without body-parser; anything else goes
 * through jsonBody()'s own handlers, so every refusal (415, 413, 400) is word for word theirs.
 * Returns nothing (no promise) when there is no body, or when it had already arrived (read at once).
 */
export function jsonBodyReader(
  limitBytes: number,
): (req: express.Request, res: express.Response) => Promise<void> | undefined {
  const general = jsonBody(limitBytes);
  return (req, res) => {
    const h = req.headers;
    const length = h['content-length'];
    const chunked = h['transfer-encoding'] !== undefined;
    if (!chunked && (length === undefined || length === '0')) return undefined;
    const type = h['content-type'];
    if (
      chunked ||
      length === undefined ||
      h['content-encoding'] !== undefined ||
      type === undefined ||
      !JSON_TYPES.has(type.toLowerCase()) ||
      !LENGTH.test(length) ||
      Number(length) > limitBytes ||
      // body-parser leaves a request it sees as finished alone
      !req.socket?.writable ||
      (req.complete && !req.readable)
    )
      return runHandlers(general, req, res);
    const n = Number(length);
    // Its Content-Length bytes already buffered — it came with the headers, the usual case by the
    // time the caller is authenticated — and nothing reading it: taken now, without listeners or a
    // promise (the HTTP framing guarantees the body is exactly those bytes).
    if (req.readableLength === n && req.readableFlowing === null) {
      const buf = req.read(n) as Buffer | null;
      if (buf?.length === n) {
        req.body = parseJsonText(buf);
        keepBodyBytes(req.body, buf);
        return undefined;
      }
    }
    return readJson(req, n);
  };
}

export function notFound(): RequestHandler {
  return (_req, _res, next) => next(new ApiError('not_found'));
}

interface BodyParserError {
  type?: string;
  status?: number;
}

function toApiError(err: unknown, req: express.Request): ApiError {
  if (err instanceof ApiError) return err;
  const { type, status } = (err ?? {}) as BodyParserError;
  if (type === 'entity.parse.failed') return new ApiError('invalid_json');
  if (type === 'entity.too.large') return new ApiError('request_too_large');
  if (type === 'encoding.unsupported' || type === 'charset.unsupported')
    return new ApiError('unsupported_media_type');
  if (type === 'request.aborted')
    return new ApiError('invalid_json', { message: 'Request body was cut short' });
  // A lost database is an outage the caller should retry, not a bug (spec §7: 503).
  if (databaseUnavailable(err))
    return new ApiError('service_unavailable', { headers: { 'retry-after': '5' } });
  // The router could not decode a path parameter (`/api/endpoints/%ff`).
  if (err instanceof URIError) return new ApiError('malformed_path');
  // Any other 4xx the body parser or router raised is the client's mistake, e.g. a body that does
  // not decode with its Content-Encoding.
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const encoding = req.headers['content-encoding'];
    return new ApiError('invalid_json', {
      message: encoding
        ? `The request body could not be decoded with its Content-Encoding (${encoding})`
        : 'The request could not be read',
    });
  }
  return new ApiError('internal_error');
}

/** How often a request refused because the database is unavailable is logged (the others counted). */
export const DB_UNAVAILABLE_LOG_MS = 10_000;

/** The one place errors become responses, in the route family's shape. */
export function errorHandler(logger: Logger, clock: () => number = Date.now): ErrorRequestHandler {
  // Requests refused because the database is gone are logged once per DB_UNAVAILABLE_LOG_MS, the next
  // line saying how many were refused meanwhile (an outage is one event, not one line per request).
  let quietUntil = 0;
  let refused = 0;
  return (err, req, res, _next) => {
    const apiError = toApiError(err, req);
    const lost = apiError.code === 'service_unavailable' && !(err instanceof ApiError);
    if (lost) {
      const now = clock();
      if (now >= quietUntil) {
        logger.warn(
          {
            database: databaseUnavailable(err),
            requestId: res.locals.requestId,
            route: routeTemplate(req),
            ...(refused ? { refusedSinceLastLine: refused } : {}),
          },
          'database unavailable',
        );
        quietUntil = now + DB_UNAVAILABLE_LOG_MS;
        refused = 0;
      } else refused++;
    } else if (apiError.status >= 500 && !(err instanceof ApiError)) {
      logger.error({ err, requestId: res.locals.requestId, route: routeTemplate(req) }, 'unexpected failure');
    }
    if (res.headersSent) {
      res.destroy();
      return;
    }
    for (const [name, value] of Object.entries(apiError.headers)) res.setHeader(name, value);
    // Refused before its body was read (e.g. 401): do not wait for the rest of it on this connection.
    if (!req.complete) res.setHeader('connection', 'close');
    res.status(apiError.status).json(errorBody(apiError, familyOf(req.originalUrl)));
  };
}
