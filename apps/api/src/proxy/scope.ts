// Everything that ends a proxied call early, as one signal: the client leaving, its key being
// revoked, the API shutting down past its grace, and the wall-clock limit (spec §8: it covers the whole call, streaming included).
import type { Response } from 'express';
import { ApiError } from '../errors.ts';

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

/**
 * One object per call, no closures: it listens to the revocation and shutdown signals itself
 * (handleEvent: either one aborts the call with its own reason).
 */
class Scope implements CallScope {
  readonly controller = new AbortController();
  private readonly limit: NodeJS.Timeout;
  private readonly shutdown: AbortSignal | undefined;

  constructor(
    private readonly res: Scoped,
    private readonly revocation: AbortSignal | undefined,
    readonly limitMs: number,
  ) {
    res[SCOPE] = this;
    res.on('close', onResponseClose);
    this.limit = setTimeout(onLimit, limitMs, this);
    revocation?.addEventListener('abort', this, { once: true });
    // The API shutting down past its grace (server.ts): the call ends with an error the client sees.
    this.shutdown = res.app?.locals.shutdown as AbortSignal | undefined;
    if (this.shutdown?.aborted) this.controller.abort(this.shutdown.reason);
    else this.shutdown?.addEventListener('abort', this, { once: true });
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  handleEvent(event: Event): void {
    this.controller.abort((event.target as AbortSignal).reason);
  }

  end(): void {
    clearTimeout(this.limit);
    this.res.off('close', onResponseClose);
    if (this.res[SCOPE] === this) this.res[SCOPE] = undefined;
    this.revocation?.removeEventListener('abort', this);
    this.shutdown?.removeEventListener('abort', this);
  }
}

export function callScope(res: Response, revocation: AbortSignal | undefined, limitMs: number): CallScope {
  return new Scope(res, revocation, limitMs);
}
