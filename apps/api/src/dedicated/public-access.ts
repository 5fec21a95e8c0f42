// Who may call a Public endpoint without a key, and how often (spec §5.2): rate-limited per endpoint
// and per client address, billed to the owning account.
import type { Request, Response } from 'express';
import { isEndpointId, type DedicatedEndpoint } from '@berth/crds';
import { ApiError } from '../platform/errors.ts';
import type { PublicAccess } from '../http/auth.ts';
import type { DedicatedDeps } from './call.ts';

/**
 * A Public endpoint needs no key: it is rate-limited per endpoint and per client address, and the
 * call is billed to the owning account (spec §5.2). Anything else needs a key, unknown ids included:
 * without one, an unknown id and a Private endpoint both answer 401 (existence is not revealed).
 */
export function publicAccess(deps: Pick<DedicatedDeps, 'endpoints' | 'limiter' | 'config'>): PublicAccess {
  return (req: Request, res: Response) => {
    const id = String(req.params.id);
    const e = isEndpointId(id) ? deps.endpoints.get(id) : undefined;
    return e?.spec.authMode === 'Public' ? limited(req, res, e, deps) : undefined;
  };
}

/** The Public endpoint's rate limits: headers on every answer, 429 past either limit. */
async function limited(
  req: Request,
  res: Response,
  e: DedicatedEndpoint,
  deps: Pick<DedicatedDeps, 'limiter' | 'config'>,
): Promise<{ accountId: string }> {
  const id = e.metadata.name;
  const client = req.ip ?? req.socket.remoteAddress ?? 'unknown';
  // The client's limit first: a request it refuses is not counted against the endpoint, so one
  // client cannot use up the endpoint's allowance for everyone else.
  const perClient = await deps.limiter.hit(`cl:${id}:${client}`, deps.config.publicLimitPerClient);
  const perEndpoint = perClient.allowed
    ? await deps.limiter.hit(`ep:${id}`, deps.config.publicLimitPerEndpoint)
    : undefined;
  const tightest = perEndpoint && perEndpoint.remaining < perClient.remaining ? perEndpoint : perClient;
  res.setHeader('x-ratelimit-limit-requests', String(tightest.limit));
  res.setHeader('x-ratelimit-remaining-requests', String(tightest.remaining));
  res.setHeader('x-ratelimit-reset-requests', `${Math.ceil(tightest.resetMs / 1000)}s`);
  const refused = !perClient.allowed ? perClient : !perEndpoint!.allowed ? perEndpoint : undefined;
  if (refused) {
    throw new ApiError('rate_limited', {
      message: `Rate limit reached for public endpoint ${id}: ${refused.limit} requests per minute${refused === perClient ? ' per client' : ''}`,
      headers: { 'retry-after': String(Math.max(1, Math.ceil(refused.resetMs / 1000))) },
    });
  }
  return { accountId: e.spec.account };
}
