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

export function callScope(res: Response, revocation: AbortSignal | undefined, limitMs: number): CallScope {
  const controller = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) controller.abort(new ClientGone());
  };
  res.on('close', onClose);
  const limit = setTimeout(
    () =>
      controller.abort(
        new ApiError('gateway_timeout', {
          message: `The request exceeded the wall-clock limit of ${seconds(limitMs)}`,
        }),
      ),
    limitMs,
  );
  const revoked = () => controller.abort(revocation?.reason);
  revocation?.addEventListener('abort', revoked, { once: true });
  // The API shutting down past its grace (server.ts): the call ends with an error the client sees.
  const shutdown = res.app?.locals.shutdown as AbortSignal | undefined;
  const stopping = () => controller.abort(shutdown?.reason);
  if (shutdown?.aborted) stopping();
  else shutdown?.addEventListener('abort', stopping, { once: true });
  return {
    signal: controller.signal,
    end() {
      clearTimeout(limit);
      res.off('close', onClose);
      revocation?.removeEventListener('abort', revoked);
      shutdown?.removeEventListener('abort', stopping);
    },
  };
}
