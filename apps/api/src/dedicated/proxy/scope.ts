// Everything that ends a proxied call early, as one signal: the client leaving, its key being
// revoked, the API shutting down past its grace, and the wall-clock limit (spec §8: it covers the whole call, streaming included).
import type { Response } from 'express';
import { ApiError } from '../../platform/errors.ts';
import type { Revocable, TrackedCall } from '../../http/principal.ts';

/** The client went away: nothing more to send. */
export class ClientGone extends Error {}

/** `780 s`, `1.5 s`: whole seconds as they are, others to a tenth (never rounded to a wrong limit). */
export function seconds(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${(ms / 1000).toFixed(1)} s`;
}

export interface CallScope {
  signal: AbortSignal;
  end(): void;
}

/** The scope of the call a response answers (its 'close' listener is shared by every response). */
const SCOPE = Symbol('call scope');
type Scoped = Response & { [SCOPE]?: Scope };

function onResponseClose(this: Scoped) {
  if (!this.writableFinished) this[SCOPE]?.controller.abort(new ClientGone());
}

function onLimit(scope: Scope) {
  scope.controller.abort(
    new ApiError('gateway_timeout', {
      message: `The request exceeded the wall-clock limit of ${seconds(scope.limitMs)}`,
    }),
  );
}

/** Live scopes per shutdown signal: one listener on the signal ends them all (no listener per call). */
const live = new WeakMap<AbortSignal, Set<Scope>>();

function liveScopes(shutdown: AbortSignal): Set<Scope> {
  let scopes = live.get(shutdown);
  if (!scopes) {
    const set = new Set<Scope>();
    live.set(shutdown, set);
    shutdown.addEventListener(
      'abort',
      () => {
        for (const scope of set) scope.revoke(shutdown.reason);
      },
      { once: true },
    );
    scopes = set;
  }
  return scopes;
}

/**
 * One object per call, no closures: a key's revocation tells it directly (a linked TrackedCall, or
 * it listens to a plain signal itself: handleEvent), and the API's shutdown past its grace through
 * the set of live scopes; either aborts the call with its own reason.
 */
class Scope implements CallScope, Revocable {
  private readonly res: Scoped;
  private readonly revocation: TrackedCall | AbortSignal | undefined;
  readonly limitMs: number;
  readonly controller = new AbortController();
  private readonly limit: NodeJS.Timeout;
  private readonly live: Set<Scope> | undefined;

  constructor(res: Scoped, revocation: TrackedCall | AbortSignal | undefined, limitMs: number) {
    this.res = res;
    this.revocation = revocation;
    this.limitMs = limitMs;
    res[SCOPE] = this;
    res.on('close', onResponseClose);
    this.limit = setTimeout(onLimit, limitMs, this);
    if (revocation instanceof AbortSignal) revocation.addEventListener('abort', this, { once: true });
    else revocation?.link(this);
    // The API shutting down past its grace (server.ts): the call ends with an error the client sees.
    const shutdown = res.app?.locals.shutdown as AbortSignal | undefined;
    if (shutdown?.aborted) this.controller.abort(shutdown.reason);
    else if (shutdown) (this.live = liveScopes(shutdown)).add(this);
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  revoke(reason: unknown): void {
    this.controller.abort(reason);
  }

  handleEvent(event: Event): void {
    this.controller.abort((event.target as AbortSignal).reason);
  }

  end(): void {
    clearTimeout(this.limit);
    this.res.off('close', onResponseClose);
    if (this.res[SCOPE] === this) this.res[SCOPE] = undefined;
    if (this.revocation instanceof AbortSignal) this.revocation.removeEventListener('abort', this);
    else this.revocation?.link(undefined);
    this.live?.delete(this);
  }
}

/**
 * The call's scope. `revocation`: the caller's tracked key (KeyCaller.tracked, linked without a
 * signal) or any signal whose abort ends the call.
 */
export function callScope(
  res: Response,
  revocation: TrackedCall | AbortSignal | undefined,
  limitMs: number,
): CallScope {
  return new Scope(res, revocation, limitMs);
}
