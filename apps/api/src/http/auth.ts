import { createHash, timingSafeEqual } from 'node:crypto';
import type { Request, RequestHandler, Response } from 'express';
import { ApiError } from '../errors.ts';
import type { KeyService, Principal } from '../keys/service.ts';
import type { Scope } from '../repositories/keys.ts';

/** The Bearer token, or null when the header is absent or not a Bearer credential. */
export function bearerToken(req: Request): string | null {
  const header = req.headers.authorization;
  if (!header) return null;
  const match = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
  return match ? match[1]! : null;
}

export function principalOf(res: Response): Principal {
  const p = res.locals.principal as Principal | undefined;
  if (!p) throw new Error('principalOf() on a route without requireKey()');
  return p;
}

/**
 * Authenticates an API key and checks its scope. The request is tied to its key so a revocation
 * aborts it (`res.locals.keySignal`).
 */
export function requireKey(keys: KeyService, scopes: readonly Scope[]): RequestHandler {
  const needed = scopes.map((s) => `"${s}"`).join(' or ');
  return async (req, res, next) => {
    const token = bearerToken(req);
    if (!token) throw new ApiError('missing_authorization');
    const result = await keys.verify(token);
    if (!result.ok) throw new ApiError(result.code);
    const { principal } = result;
    if (!scopes.includes(principal.scope)) {
      throw new ApiError('insufficient_scope', {
        message: `This API key has scope "${principal.scope}"; this route needs a key with scope ${needed}`,
      });
    }
    res.locals.principal = principal;
    const tracked = keys.track(principal.keyId);
    res.locals.keySignal = tracked.signal;
    res.on('close', tracked.release);
    next();
  };
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
