// Managed tools on the front door's OpenAI routes (inference/). A request names them in `tools` as the
// Responses API does, `{"type": "mcp", "server_label": "<tool_id>"}` (optionally `allowed_tools`), on
// /api/responses and on /api/chat/completions alike. The route then runs the managed loop (./loop.ts): each
// model step is a non-streamed call of the catalog model through the Elastic caller (reserved, fallen back
// and settled like any call), each tool call is charged at the tool's price. The answer goes back in the
// route's own shape: a chat completion (streamed as chunks, tool progress as `berth_tool` chunks,
// ./stream.ts) or a Responses object with `mcp_call` items (streamed as typed events, ./responses.ts).
import type { Response } from 'express';
import type { Wallet } from '../billing/wallet.ts';
import type { ElasticCaller, ModelCall } from '../elastic/call.ts';
import type { CatalogModel } from '../elastic/entry.ts';
import { ApiError, errorFrame } from '../platform/errors.ts';
import { SSE_HEADERS } from '../dedicated/proxy/heartbeat.ts';
import { ClientGone } from '../dedicated/proxy/scope.ts';
import type { ToolRepository } from './repository.ts';
import type { Sealer } from '../platform/sealed.ts';
import { invalidBody } from '../http/validate.ts';
import { requireTools } from './access.ts';
import {
  runManagedLoop,
  type CallModel,
  type ChatMessage,
  type ChatToolCall,
  type LoopEvent,
  type LoopResult,
  type ModelStep,
} from './loop.ts';
import {
  id,
  responseObject,
  responsesStreamWriter,
  responsesToChat,
  type StreamTarget,
  type StreamWriter,
} from './responses.ts';
import { closeManagedServers, openManagedServers, walletCharger } from './managed.ts';
import { chatStreamFrames } from './stream.ts';
import { childSpan, endWith, type Context } from '../platform/tracing.ts';
import type { ChargeTool } from './loop.ts';

export interface ManagedToolDeps {
  tools: Pick<ToolRepository, 'lookup'>;
  sealer?: Sealer;
  wallet: Pick<Wallet, 'reserve'>;
  /** Model calls per managed request (MANAGED_TOOL_MAX_STEPS; the last is told to answer). */
  maxSteps: number;
  /** MANAGED_TOOL_MAX_RESPONSE_BYTES: what is read of each MCP answer at most. */
  maxResponseBytes: number;
}

/** The managed tools a request asks for, and its other tools (passed to the model as they are). */
export interface ManagedAsks {
  managed: ManagedAsk[];
  others: unknown[];
}

export interface ManagedAsk {
  toolId: string;
  allowedTools?: string[];
}

/**
 * The managed tools a body's `tools` asks for, and the other tools (passed to the model as they
 * are). Undefined when it asks for none: the call is an ordinary one.
 */
export function managedTools(tools: unknown): ManagedAsks | undefined {
  if (!Array.isArray(tools)) return undefined;
  const managed: ManagedAsk[] = [];
  const others: unknown[] = [];
  tools.forEach((t, i) => {
    const entry = t as Record<string, unknown> | null;
    if (typeof entry !== 'object' || entry === null || entry.type !== 'mcp') return void others.push(t);
    const label = entry.server_label;
    if (typeof label !== 'string' || label === '')
      throw invalidBody('must name a managed tool (GET /api/tools lists them)', `tools.${i}.server_label`);
    if (entry.server_url !== undefined || entry.connector_id !== undefined)
      throw invalidBody(
        'is not supported: managed tools are MCP servers the platform registers, named by server_label',
        `tools.${i}.${entry.server_url !== undefined ? 'server_url' : 'connector_id'}`,
      );
    const allowed = entry.allowed_tools as unknown;
    const names =
      allowed === undefined || allowed === null
        ? undefined
        : Array.isArray(allowed)
          ? allowed
          : typeof allowed === 'object'
            ? (allowed as { tool_names?: unknown }).tool_names
            : allowed;
    if (names !== undefined && (!Array.isArray(names) || names.some((n) => typeof n !== 'string')))
      throw invalidBody('must be a list of the server’s tool names', `tools.${i}.allowed_tools`);
    managed.push({ toolId: label, ...(names ? { allowedTools: names as string[] } : {}) });
  });
  return managed.length ? { managed, others } : undefined;
}

// --- the request ----------------------------------------------------------------------------------

export interface ManagedCall {
  route: 'chat' | 'responses';
  body: Record<string, unknown>;
  asks: ManagedAsks;
  model: CatalogModel;
  /** The fields of each step's ModelCall the route fixes (who, request id, signal, Olympus). */
  call: Pick<ModelCall, 'accountId' | 'keyId' | 'requestId' | 'signal' | 'allowDearerFallback' | 'trace'>;
  toolPin: readonly string[];
}

/**
 * Each managed tool call as a span of the request's trace (tracing on): from its charge to its
 * settlement (answered) or release (not); the tool's id, never its arguments or answer.
 */
function tracedCharge(charge: ChargeTool, trace: Context | undefined): ChargeTool {
  return async (toolId, price) => {
    const span = childSpan('berth.tools.call', trace, {
      'berth.tool.id': toolId,
      'gen_ai.tool.name': toolId,
    });
    if (!span) return charge(toolId, price);
    const hold = await endWith(undefined, charge(toolId, price)).catch((err: unknown) => {
      span.end(err);
      throw err;
    });
    if (!hold) {
      span.end({ code: 'insufficient_balance' });
      return hold;
    }
    return {
      settle: () => (hold.settle(), span.set({ 'berth.outcome': 'ok' }), span.end()),
      release: () => (hold.release(), span.end({ code: 'not_answered' })),
    };
  };
}

/** Runs the managed loop for one Elastic request and answers on `res`. */
export async function answerManaged(
  deps: ManagedToolDeps & { caller: ElasticCaller },
  c: ManagedCall,
  res: Response,
): Promise<void> {
  const records = await requireTools(
    deps.tools,
    { accountId: c.call.accountId, toolPin: c.toolPin },
    c.asks.managed.map((a) => a.toolId),
  );
  const allowed = new Map(c.asks.managed.map((a) => [a.toolId, a.allowedTools]));
  const chatBody =
    c.route === 'responses'
      ? responsesToChat(c.body, c.asks.others)
      : { ...c.body, tools: c.asks.others.length ? c.asks.others : undefined };
  delete chatBody.stream;
  delete chatBody.stream_options;
  if (!Array.isArray(chatBody.messages)) throw invalidBody('must be a list of messages', 'messages');
  const stream = c.body.stream === true;
  const created = Math.floor(Date.now() / 1000);
  const respId = id(c.route === 'chat' ? 'chatcmpl-' : 'resp_');
  let answeredBy = c.model.name;
  let steps = 0;

  const callModel: CallModel = async (stepBody, { signal }) => {
    const span = childSpan('berth.tools.step', c.call.trace, { 'berth.tools.step': steps++ });
    const { model, body } = await endWith(
      span,
      deps.caller.complete({
        ...c.call,
        model: c.model,
        kinds: ['chat'],
        path: '/chat/completions',
        body: stepBody,
        requestBytes: JSON.stringify(stepBody).length,
        signal,
        ...(span ? { trace: span.context } : {}),
      }),
      (done) => ({ 'berth.catalog_model': done.model.name, 'berth.outcome': 'ok' }),
    );
    answeredBy = model.name;
    const choice = (body.choices as { message: ModelStep['message']; finish_reason: string | null }[])?.[0];
    if (!choice?.message) throw new ApiError('engine_unreachable');
    const usage = body.usage as ModelStep['usage'];
    return {
      message: {
        role: 'assistant',
        content: choice.message.content ?? null,
        ...(choice.message.tool_calls?.length
          ? { tool_calls: choice.message.tool_calls as ChatToolCall[] }
          : {}),
      },
      finish_reason: choice.finish_reason,
      ...(usage ? { usage } : {}),
      model: model.name,
    };
  };

  const servers = await openManagedServers(
    records.map((t) => {
      const only = allowed.get(t.id);
      return only ? { ...t, allowedTools: only } : t;
    }),
    { sealer: deps.sealer, maxResponseBytes: deps.maxResponseBytes },
    c.call.signal,
  );
  // Streams start at the first event, so a refusal of the first model call (402, 429) is still a
  // plain HTTP error.
  const open = () => {
    if (res.headersSent) return;
    res.status(200);
    for (const [name, value] of Object.entries(SSE_HEADERS)) res.setHeader(name, value);
    res.flushHeaders();
  };
  const sse = stream
    ? streamWriter(c, { res, id: respId, created, model: () => answeredBy, open })
    : undefined;
  try {
    const result = await runManagedLoop({
      body: chatBody as Record<string, unknown> & { messages: ChatMessage[] },
      servers,
      callModel,
      charge: tracedCharge(
        walletCharger(deps.wallet, { accountId: c.call.accountId, keyId: c.call.keyId }),
        c.call.trace,
      ),
      maxSteps: deps.maxSteps,
      signal: c.call.signal,
      ...(sse ? { onEvent: sse.event } : {}),
    });
    if (sse) return sse.end(result);
    if (c.route === 'responses')
      return void res.json(responseObject(respId, created, c.body, result.final.model, result));
    res.json({
      id: respId,
      object: 'chat.completion',
      created,
      model: result.final.model,
      choices: [
        {
          index: 0,
          message: result.final.message,
          logprobs: null,
          finish_reason: result.final.finish_reason,
        },
      ],
      usage: result.usage,
      berth_tool_calls: result.toolCalls,
    });
  } catch (err) {
    if (err instanceof ClientGone) return;
    if (!res.headersSent) throw err;
    if (!res.writableEnded && !res.destroyed) {
      const reason = err instanceof ApiError ? err : new ApiError('internal_error');
      res.end(errorFrame(reason) + 'data: [DONE]\n\n');
    }
  } finally {
    await closeManagedServers(servers);
  }
}

/** The stream of a managed request in the route's format; events are written as they happen. */
function streamWriter(c: ManagedCall, to: StreamTarget): StreamWriter {
  if (c.route !== 'chat') return responsesStreamWriter(c.body, to);
  const { res, open } = to;
  let frames: ReturnType<typeof chatStreamFrames> | undefined;
  const get = () => (frames ??= chatStreamFrames({ id: to.id, model: to.model(), created: to.created }));
  const includeUsage =
    (c.body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
  return {
    event(e: LoopEvent) {
      open();
      res.write(get().event(e));
    },
    end(result: LoopResult) {
      open();
      res.end(get().end(result.final, includeUsage ? result.usage : undefined));
    },
  };
}
