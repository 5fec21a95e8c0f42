// node:http helpers shared by the routes: JSON and vLLM-error answers, bounded body reading.
import type http from 'node:http';
import { errorBody, type VllmError } from './errors.ts';

const MAX_BODY_BYTES = 16 * 1024 * 1024;

export function sendJson(
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

export function sendError(res: http.ServerResponse, e: VllmError, extra?: http.OutgoingHttpHeaders): void {
  sendJson(res, e.status, errorBody(e), extra);
}

export function methodNotAllowed(res: http.ServerResponse): void {
  sendJson(res, 405, '{"detail":"Method Not Allowed"}');
}

export function notFound(res: http.ServerResponse): void {
  sendJson(res, 404, '{"detail":"Not Found"}');
}

/** A request header as a non-negative integer, or null when absent or not one. */
export function headerInt(req: http.IncomingMessage, name: string): number | null {
  const v = req.headers[name];
  if (typeof v !== 'string' || !/^\d+$/.test(v.trim())) return null;
  return Number(v.trim());
}

/** Reads the whole body (at most 16 MiB; more answers 413) and hands it over. */
export function readBody(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  then: (raw: Buffer) => void,
): void {
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
    then(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
  });
}
