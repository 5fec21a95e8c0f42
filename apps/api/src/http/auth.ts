import { createHash, timingSafeEqual } from 'node:crypto';
import type { Request, RequestHandler, Response } from 'express';
import { ApiError } from '../platform/errors.ts';
import { childSpan, tracing, type TraceSpan } from '../platform/tracing.ts';
import { simpleError } from './openapi.ts';
import type { KeyVerifier, Principal, Scope, TrackedCall, VerifyResult } from './principal.ts';
import { changesState, csrfValid, sessionAccount } from './session.ts';

/** The Bearer token, or null when the header is absent or not a Bearer credential. */
export function bearerToken(req: Request): string | null {
  const header = req.headers.authorization;
  if (!header) return null;
  const match = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
  return match ? match[1]! : null;
}

/** Who a request acts for: a key (its principal, and a signal that aborts when it is revoked). */
export interface KeyCaller {
  accountId: string;
  principal: Principal;
  /** Aborts, with 401 `Invalid API key` as its reason, when the key is revoked mid-request. */
  readonly signal: AbortSignal;
  /** The request as its key's service tracks it (revocation without a signal: callScope links it). */
  tracked?: TrackedCall;
  /** Set when the call came from a dashboard session (no Bearer header) rather than a key. */
  session?: true;
}

/**
 * Whether a dashboard session (no Bearer header) may call a route, and as what:
 * - `inference` (spec §5.3): as the account's oldest active key that may call inference, looked up
 *   on every call, else 403 `You must generate an API key first to use inference.`;
 * - `manage`: as the account itself, like a global key (keys, billing, endpoints).
 */
export type SessionMode = 'inference' | 'manage';

/** A caller of a route that also admits calls without a key (Public endpoints). */
export type Caller =
  KeyCaller | { accountId: string; principal?: undefined; signal?: undefined; tracked?: undefined };

/**
 * Decides whether a request may go without a key: the account it is billed to, or undefined when a
 * key is required (synchronously: the common case costs no promise). It runs first and may refuse
 * by throwing (unknown resource, rate limits).
 */
export type PublicAccess = (req: Request, res: Response) => Promise<{ accountId: string }> | undefined;

/** The caller requireKey() admitted. */
export function callerOf(res: Response): Caller {
  const c = res.locals.caller as Caller | undefined;
  if (!c) throw new Error('callerOf() on a route without requireKey()');
  return c;
}

/**
 * Authenticates an API key and checks its scope; the request is tied to its key, so a revocation
 * aborts it (the caller's signal). With `public`, a request that hook admits needs no key.
 */
export function requireKey(
  keys: KeyVerifier,
  scopes: readonly Scope[],
  options: { public?: PublicAccess; session?: SessionMode } = {},
): RequestHandler {
  const authenticate = keyAuthenticator(keys, scopes, options);
  return async (req, res, next) => {
    const pending = authenticate(req, res);
    if (pending) await pending;
    next();
  };
}

/**
 * requireKey() without the middleware around it: admits the request (the caller in
 * `res.locals.caller`, see callerOf) or throws its ApiError — at once, without a promise, when the
 * key is cached (KeyVerifier.verifyNow); otherwise the promise of it. The front door's fast paths
 * (inference/fast-path.ts, Routes' fast routes) call it directly.
 */
export function keyAuthenticator(
  keys: KeyVerifier,
  scopes: readonly Scope[],
  options: { public?: PublicAccess; session?: SessionMode } = {},
): (req: Request, res: Response) => Promise<void> | undefined {
  const needed = scopes.map((s) => `"${s}"`).join(' or ');
  /** A key's verification, settled: the caller admitted, or the refusal thrown. */
  const admitKey = (result: VerifyResult, res: Response): void => {
    if (!result.ok) throw new ApiError(result.code);
    const { principal } = result;
    if (!scopes.includes(principal.scope)) {
      throw new ApiError('insufficient_scope', {
        message: `This API key has scope "${principal.scope}"; this route needs a key with scope ${needed}`,
      });
    }
    res.locals.principal = principal; // the access log names the account
    res.locals.caller = trackedCaller(keys, principal, res);
  };
  const admit = (req: Request, res: Response): Promise<void> | undefined => {
    const open = options.public?.(req, res);
    if (open)
      return open.then(({ accountId }) => {
        res.locals.caller = { accountId } satisfies Caller;
      });
    const token = bearerToken(req);
    if (!token) return admitSession(req, res);
    const now = keys.verifyNow?.(token);
    if (now) {
      admitKey(now, res);
      return undefined;
    }
    return keys.verify(token).then((result) => admitKey(result, res));
  };
  const admitSession = async (req: Request, res: Response): Promise<void> => {
    const accountId = options.session ? sessionAccount(req) : undefined;
    if (!accountId || !options.session) throw new ApiError('missing_authorization');
    if (changesState(req) && !csrfValid(req)) throw new ApiError('csrf_failed');
    res.locals.caller = await sessionCaller(keys, accountId, options.session, res);
    res.locals.principal = (res.locals.caller as KeyCaller).principal;
  };
  return (req, res) => (tracing.enabled ? tracedAdmit(admit, req, res) : admit(req, res));
}

/** The key check as a span of the request's trace (its outcome; never the key). */
async function tracedAdmit(
  admit: (req: Request, res: Response) => Promise<void> | undefined,
  req: Request,
  res: Response,
): Promise<void> {
  const span = childSpan('berth.auth', (res.locals.trace as TraceSpan | undefined)?.context);
  try {
    await admit(req, res);
    const caller = res.locals.caller as Caller;
    span?.set({ 'berth.outcome': 'ok', 'berth.auth.kind': caller.principal ? 'key' : 'public' });
    span?.end();
  } catch (err) {
    span?.end(err);
    throw err;
  }
}

/** The tracked call a response releases when it closes (one listener shared by every response). */
const TRACKED = Symbol('tracked call');
type WithTracked = Response & { [TRACKED]?: TrackedCall };
function releaseTracked(this: WithTracked) {
  this[TRACKED]?.release();
}

/** A key's caller, tracked until the response closes: its signal is made only if read. */
function trackedCaller(keys: KeyVerifier, principal: Principal, res: Response, session?: true): KeyCaller {
  const tracked = keys.track(principal.keyId);
  (res as WithTracked)[TRACKED] = tracked;
  res.on('close', releaseTracked);
  return new TrackedCaller(principal, tracked, session);
}

class TrackedCaller implements KeyCaller {
  readonly principal: Principal;
  readonly tracked: TrackedCall;
  readonly accountId: string;
  readonly session?: true;
  constructor(principal: Principal, tracked: TrackedCall, session?: true) {
    this.principal = principal;
    this.tracked = tracked;
    this.accountId = principal.accountId;
    if (session) this.session = session;
  }
  get signal(): AbortSignal {
    return this.tracked.signal;
  }
}

async function sessionCaller(
  keys: KeyVerifier,
  accountId: string,
  mode: SessionMode,
  res: Response,
): Promise<KeyCaller> {
  if (mode === 'manage') {
    // No key is involved: the session acts as the account, with a global key's reach.
    const principal: Principal = {
      keyId: 'session',
      accountId,
      scope: 'global',
      pinnedModel: null,
      toolPin: [],
    };
    return { accountId, principal, signal: new AbortController().signal, session: true };
  }
  const principal = await keys.sessionPrincipal(accountId);
  if (!principal) throw new ApiError('no_inference_key');
  // Tied to that key like a Bearer call: revoking it ends the call.
  return trackedCaller(keys, principal, res, true);
}

/** /admin routes: the operator's ADMIN_TOKEN as a Bearer token, compared in constant time. */
export function requireAdmin(adminToken: string): RequestHandler {
  const expected = createHash('sha256').update(adminToken).digest();
  return (req, _res, next) => {
    const token = bearerToken(req);
    if (!token) throw new ApiError('missing_authorization');
    const given = createHash('sha256').update(token).digest();
    if (!timingSafeEqual(given, expected)) throw new ApiError('invalid_admin_token');
    next();
  };
}

/** Settings → Keys and Settings → Billing: a global key, or the dashboard's session. */
export const globalKey = { scopes: ['global'], session: 'manage' } as const;
export const globalKeyErrors = {
  401: { description: 'Missing, malformed or revoked key', schema: simpleError },
  403: { description: 'The key is not a global key', schema: simpleError },
};
