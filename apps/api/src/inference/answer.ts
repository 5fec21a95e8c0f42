// The front door's answer on an HTTP response: the call ./decide.ts decided, made by the product that
// makes it — a dedicated endpoint (dedicated/call.ts), the managed tool loop (tools/answer.ts), or the
// Elastic caller — each writing to the response as the answer arrives, within the call's scope (the
// client leaving, its key revoked, the wall-clock limit).
import type { Response } from 'express';
import type { KeyCaller } from '../http/auth.ts';
import { callDedicated, type DedicatedDeps } from '../dedicated/call.ts';
import { callScope } from '../dedicated/proxy/scope.ts';
import type { ElasticCaller } from '../elastic/call.ts';
import { answerManaged, type ManagedToolDeps } from '../tools/answer.ts';
import type { Context } from '../platform/tracing.ts';
import type { CallPlan, InferenceRoute } from './decide.ts';

export interface AnswerDeps {
  caller: ElasticCaller;
  /** REQUEST_TIMEOUT_MS: the wall clock of a catalog call. */
  requestTimeoutMs: number;
  /** Dedicated endpoints' call path (present whenever decideCall may plan one). */
  dedicated?: Pick<DedicatedDeps, 'endpoints' | 'upstream' | 'usage' | 'dispatcher' | 'config' | 'metrics'>;
  /** Managed tools (present whenever decideCall may plan them). */
  managed?: ManagedToolDeps;
}

/** One request the front door answers over HTTP. */
export interface HttpCall {
  res: Response;
  caller: KeyCaller;
  route: InferenceRoute;
  body: Record<string, unknown>;
  requestBytes: number;
  requestId: string;
  /** `X-Berth-Hold: false` (dedicated endpoints only). */
  noHold: boolean;
  /** The request's trace (platform/tracing.ts), handed to the call. */
  trace?: Context;
}

export async function answerCall(deps: AnswerDeps, plan: CallPlan, http: HttpCall): Promise<void> {
  const { res, caller, route } = http;
  if (plan.kind === 'dedicated')
    return callDedicated(deps.dedicated!, plan.endpoint, {
      res,
      caller,
      method: 'post',
      upstreamPath: route.upstreamPath,
      payload: plan.body,
      requestId: http.requestId,
      noHold: http.noHold,
      ...(http.trace ? { trace: http.trace } : {}),
    });
  const scope = callScope(res, caller.tracked ?? caller.signal, deps.requestTimeoutMs);
  try {
    if (plan.kind === 'managed')
      return await answerManaged(
        { ...deps.managed!, caller: deps.caller },
        {
          route: route.path === '/api/responses' ? 'responses' : 'chat',
          body: http.body,
          asks: plan.asks,
          model: plan.model,
          call: {
            accountId: caller.accountId,
            keyId: caller.principal.keyId,
            requestId: http.requestId,
            signal: scope.signal,
            ...(caller.principal.allowDearerFallback ? { allowDearerFallback: true } : {}),
            ...(http.trace ? { trace: http.trace } : {}),
          },
          toolPin: caller.principal.toolPin,
        },
        res,
      );
    await deps.caller.call(
      {
        model: plan.model,
        kinds: route.kinds,
        path: route.upstreamPath,
        body: http.body,
        requestBytes: http.requestBytes,
        accountId: caller.accountId,
        keyId: caller.principal.keyId,
        requestId: http.requestId,
        signal: scope.signal,
        ...(caller.principal.allowDearerFallback ? { allowDearerFallback: true } : {}),
        ...(http.trace ? { trace: http.trace } : {}),
      },
      res,
    );
  } finally {
    scope.end();
  }
}
