// A dashboard session as a request carries it: the cookie, the signed-in account, the CSRF check.
// The sign-in and the session store are the accounts product's (accounts/auth/); the routes read
// sessions through these.
import { timingSafeEqual } from 'node:crypto';
import type { Request, RequestHandler } from 'express';

declare module 'express-session' {
  interface SessionData {
    /** Set once sign-in completed. */
    accountId: string;
    /** Compared with the X-CSRF-Token header of state-changing calls. */
    csrf: string;
  }
}

export const SESSION_COOKIE = 'berth_session';
const SESSION_MARKER = `${SESSION_COOKIE}=`;

/**
 * A dashboard session's request without a Bearer key: the /api router's session middleware reads it,
 * so the paths ahead of Express (http/fast-entry.ts) leave it to the registered routes.
 */
export const sessionWithoutKey = (headers: { authorization?: string; cookie?: string }): boolean =>
  headers.authorization === undefined && !!headers.cookie?.includes(SESSION_MARKER);
export const CSRF_HEADER = 'x-csrf-token';

/**
 * The session middleware for API routes: only requests that carry the cookie and no Bearer header
 * pay for it (a key's call, the proxy's hot path, never reads a session).
 */
export function apiSessions(sessions: { middleware: RequestHandler }): RequestHandler {
  return (req, res, next) => (sessionWithoutKey(req.headers) ? sessions.middleware(req, res, next) : next());
}

/** The signed-in account of the request's session, if any. */
export function sessionAccount(req: Request): string | undefined {
  return req.session?.accountId;
}

/** Whether the request carries its session's CSRF token in X-CSRF-Token. */
export function csrfValid(req: Request): boolean {
  const expected = req.session?.csrf;
  const given = req.get(CSRF_HEADER);
  if (!expected || !given) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** GET, HEAD and OPTIONS change nothing; every other method needs the CSRF token. */
export function changesState(req: Request): boolean {
  return !['GET', 'HEAD', 'OPTIONS'].includes(req.method);
}
