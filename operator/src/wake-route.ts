import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isEndpointId } from '@berth/crds';
import type { WakeHintAnswer } from './core/controller.ts';

// POST /wake on the operator's metrics port: the API tells the leader that a request reached a
// hibernated endpoint, so the pass that writes the replica count runs at once, without waiting for
// the API server to write the wake annotation and the watch to bring it back (two round trips on a
// busy control plane: 16-92 ms each in the wake benchmark). The annotation, which the API writes
// as well, stays the record: a lost or refused hint only costs the time it would have saved.
//
//   POST /wake  Authorization: Bearer <BERTH_WAKE_TOKEN>
//   {"endpoint": "<id>", "requestedAt": "<RFC 3339, the value of the API's wake annotation>"}
//
//   202 {"result": "accepted"}       the pass is queued first
//   200 {"result": "awake"|"stale"}  nothing to do: not hibernated, or a wake older than the hibernation
//   404 {"error": ...}               no such endpoint (or the route is off: no BERTH_WAKE_TOKEN)
//   409 {"error": "not the leader"}  a standby replica; the API asks every replica
//   400, 401, 405, 413               malformed body, wrong token, not POST, body over 1 KiB

const MAX_BODY = 1024;

export interface WakeRouteOptions {
  token: string;
  /** The leader's controller takes the hint; undefined while this replica is not leading. */
  wake(name: string, requestedAt: string): WakeHintAnswer | undefined;
  onAnswer?(result: string): void;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Serves POST /wake; answers false for any other path (the metrics server's routes). */
export function wakeRoute(o: WakeRouteOptions): (req: IncomingMessage, res: ServerResponse) => boolean {
  const expected = digest(`Bearer ${o.token}`);
  const answer = (res: ServerResponse, status: number, body: object, result: string) => {
    o.onAnswer?.(result);
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  };
  return (req, res) => {
    if (req.url !== '/wake') return false;
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      answer(res, 405, { error: 'POST only' }, 'bad_request');
      return true;
    }
    if (!timingSafeEqual(digest(req.headers.authorization ?? ''), expected)) {
      answer(res, 401, { error: 'wrong or missing bearer token (BERTH_WAKE_TOKEN)' }, 'unauthorized');
      req.resume();
      return true;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) over = true;
      else chunks.push(c);
    });
    req.on('end', () => {
      if (over) return answer(res, 413, { error: `body over ${MAX_BODY} bytes` }, 'bad_request');
      let body: unknown;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        return answer(res, 400, { error: 'body is not JSON' }, 'bad_request');
      }
      const { endpoint, requestedAt } = (body ?? {}) as { endpoint?: unknown; requestedAt?: unknown };
      if (typeof endpoint !== 'string' || !isEndpointId(endpoint))
        return answer(res, 400, { error: 'endpoint must be an endpoint id' }, 'bad_request');
      if (typeof requestedAt !== 'string' || Number.isNaN(Date.parse(requestedAt)))
        return answer(res, 400, { error: 'requestedAt must be an RFC 3339 time' }, 'bad_request');
      const result = o.wake(endpoint, new Date(Date.parse(requestedAt)).toISOString());
      if (result === undefined) return answer(res, 409, { error: 'not the leader' }, 'not_leader');
      if (result === 'unknown') return answer(res, 404, { error: `no endpoint ${endpoint}` }, 'unknown');
      answer(res, result === 'accepted' ? 202 : 200, { result }, result);
    });
    return true;
  };
}
