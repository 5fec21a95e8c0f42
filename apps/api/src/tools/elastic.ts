// Managed tools on the Elastic routes. A request names them in `tools` as the Responses API does,
// `{"type": "mcp", "server_label": "<tool_id>"}` (optionally `allowed_tools`), on /api/responses and
// on /api/chat/completions alike. The route then runs the managed loop (./loop.ts): each model step
// is a non-streamed call of the catalog model through the Elastic caller (reserved, fallen back
// and settled like any call), each tool call is charged at the tool's price. The answer goes back
// in the route's own shape: a chat completion (streamed as chunks, tool progress as `berth_tool`
// chunks, ./stream.ts) or a Responses object with `mcp_call` items (streamed as typed events).
import { randomBytes } from 'node:crypto';
import type { Response } from 'express';
import type { Wallet } from '../billing/wallet.ts';
import type { ElasticCaller, ModelCall } from '../elastic/call.ts';
import type { CatalogModel } from '../elastic/entry.ts';
import { ApiError, errorFrame } from '../errors.ts';
import { SSE_HEADERS } from '../proxy/heartbeat.ts';
import { ClientGone } from '../proxy/scope.ts';
import type { ToolRepository } from '../repositories/tools.ts';
import type { Sealer } from '../secrets/sealed.ts';
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
import { closeManagedServers, openManagedServers, walletCharger } from './managed.ts';
import { chatStreamFrames } from './stream.ts';

export interface ManagedToolDeps {
  tools: Pick<ToolRepository, 'lookup'>;
  sealer?: Sealer;
  wallet: Pick<Wallet, 'reserve'>;
  /** Model calls per managed request (MANAGED_TOOL_MAX_STEPS; the last is told to answer). */
  maxSteps: number;
}

export interface ManagedAsk {
  toolId: string;
  allowedTools?: string[];
}

function invalid(message: string, param: string): ApiError {
  return new ApiError('validation_error', { message: `Invalid request body: ${param}: ${message}`, param });
}

/**
 * The managed tools a body's `tools` asks for, and the other tools (passed to the model as they
 * are). Undefined when it asks for none: the call is an ordinary one.
 */
export function managedTools(tools: unknown): { managed: ManagedAsk[]; others: unknown[] } | undefined {
  if (!Array.isArray(tools)) return undefined;
  const managed: ManagedAsk[] = [];
  const others: unknown[] = [];
  tools.forEach((t, i) => {
    const entry = t as Record<string, unknown> | null;
    if (typeof entry !== 'object' || entry === null || entry.type !== 'mcp') return void others.push(t);
    const label = entry.server_label;
    if (typeof label !== 'string' || label === '')
      throw invalid('must name a managed tool (GET /api/tools lists them)', `tools.${i}.server_label`);
    if (entry.server_url !== undefined || entry.connector_id !== undefined)
      throw invalid(
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
      throw invalid('must be a list of the server’s tool names', `tools.${i}.allowed_tools`);
    managed.push({ toolId: label, ...(names ? { allowedTools: names as string[] } : {}) });
  });
  return managed.length ? { managed, others } : undefined;
}

// --- the Responses API as chat messages, and back ------------------------------------------------

function partsText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((p: { type?: string; text?: unknown }) => (typeof p?.text === 'string' ? p.text : ''))
    .join('');
}

/** `instructions` and `input` (a string or items) as chat messages; function tools reshaped. */
export function responsesToChat(body: Record<string, unknown>, others: unknown[]): Record<string, unknown> {
  const messages: ChatMessage[] = [];
  if (typeof body.instructions === 'string') messages.push({ role: 'system', content: body.instructions });
  const input = body.input;
  if (typeof input === 'string') messages.push({ role: 'user', content: input });
  else if (Array.isArray(input))
    input.forEach((raw, i) => {
      const item = raw as Record<string, unknown>;
      if (item?.type === 'function_call_output')
        messages.push({ role: 'tool', tool_call_id: String(item.call_id), content: partsText(item.output) });
      else if (item?.type === 'function_call')
        messages.push({
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: String(item.call_id),
              type: 'function',
              function: { name: String(item.name), arguments: String(item.arguments ?? '{}') },
            },
          ],
        });
      else if (typeof item?.role === 'string' && (item.type === undefined || item.type === 'message'))
        messages.push({
          role: item.role === 'developer' ? 'system' : item.role,
          content: partsText(item.content),
        });
      else throw invalid('this input item type is not supported with managed tools', `input.${i}`);
    });
  else throw invalid('must be a string or a list of input items', 'input');
  const tools = others.map((t, i) => {
    const f = t as { type?: string; name?: unknown; description?: unknown; parameters?: unknown };
    if (f?.type !== 'function' || typeof f.name !== 'string')
      throw invalid('only function tools and managed (mcp) tools can be combined', `tools.${i}`);
    return {
      type: 'function',
      function: {
        name: f.name,
        ...(typeof f.description === 'string' ? { description: f.description } : {}),
        parameters: f.parameters ?? { type: 'object', properties: {} },
      },
    };
  });
  const chat: Record<string, unknown> = { messages };
  for (const k of ['temperature', 'top_p', 'user', 'parallel_tool_calls'] as const)
    if (body[k] !== undefined) chat[k] = body[k];
  if (typeof body.max_output_tokens === 'number') chat.max_tokens = body.max_output_tokens;
  if (tools.length) chat.tools = tools;
  const choice = body.tool_choice as { type?: string; name?: string } | string | undefined;
  if (typeof choice === 'string') chat.tool_choice = choice;
  else if (choice?.type === 'function' && choice.name)
    chat.tool_choice = { type: 'function', function: { name: choice.name } };
  return chat;
}

const id = (prefix: string) => prefix + randomBytes(12).toString('hex');

function responsesOutput(result: LoopResult): unknown[] {
  const out: unknown[] = result.toolCalls.map((c) => mcpCallItem(c, 'completed'));
  const calls = result.final.message.tool_calls ?? [];
  if (calls.length)
    for (const c of calls)
      out.push({
        type: 'function_call',
        id: id('fc_'),
        call_id: c.id,
        name: c.function.name,
        arguments: c.function.arguments,
        status: 'completed',
      });
  else out.push(messageItem(id('msg_'), result.final.message.content ?? '', 'completed'));
  return out;
}

function mcpCallItem(c: LoopResult['toolCalls'][number], status: 'in_progress' | 'completed') {
  return {
    type: 'mcp_call',
    id: 'mcp_' + c.call_id.replace(/^[a-z]+[-_]/i, ''),
    server_label: c.server_label,
    name: c.name,
    arguments: c.arguments,
    output: status === 'completed' && !c.is_error ? c.output : null,
    error: status === 'completed' && c.is_error ? c.output : null,
    status,
  };
}

function messageItem(itemId: string, text: string, status: 'in_progress' | 'completed') {
  return {
    type: 'message',
    id: itemId,
    role: 'assistant',
    status,
    content: status === 'completed' ? [{ type: 'output_text', text, annotations: [], logprobs: [] }] : [],
  };
}

function responseObject(
  respId: string,
  created: number,
  body: Record<string, unknown>,
  model: string,
  result: LoopResult | undefined,
) {
  return {
    id: respId,
    object: 'response',
    created_at: created,
    status: result ? 'completed' : 'in_progress',
    model,
    output: result ? responsesOutput(result) : [],
    tools: body.tools ?? [],
    tool_choice: body.tool_choice ?? 'auto',
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    temperature: body.temperature ?? null,
    top_p: body.top_p ?? null,
    metadata: body.metadata ?? null,
    incomplete_details: null,
    error: null,
    usage: result
      ? {
          input_tokens: result.usage.prompt_tokens,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens: result.usage.completion_tokens,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: result.usage.total_tokens,
        }
      : null,
  };
}

// --- the request ----------------------------------------------------------------------------------

export interface ManagedCall {
  route: 'chat' | 'responses';
  body: Record<string, unknown>;
  asks: { managed: ManagedAsk[]; others: unknown[] };
  model: CatalogModel;
  /** The fields of each step's ModelCall the route fixes (who, request id, signal, Olympus). */
  call: Pick<ModelCall, 'accountId' | 'keyId' | 'requestId' | 'signal' | 'renameModel'>;
  toolPin: readonly string[];
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
  if (!Array.isArray(chatBody.messages)) throw invalid('must be a list of messages', 'messages');
  const stream = c.body.stream === true;
  const created = Math.floor(Date.now() / 1000);
  const respId = id(c.route === 'chat' ? 'chatcmpl-' : 'resp_');
  let answeredBy = c.model.name;

  const callModel: CallModel = async (stepBody, { signal, onContent }) => {
    const { model, body } = await deps.caller.complete({
      ...c.call,
      model: c.model,
      kinds: ['chat'],
      path: '/chat/completions',
      body: stepBody,
      requestBytes: JSON.stringify(stepBody).length,
      signal,
    });
    answeredBy = model.name;
    const choice = (body.choices as { message: ModelStep['message']; finish_reason: string | null }[])?.[0];
    if (!choice?.message) throw new ApiError('engine_unreachable');
    const usage = body.usage as ModelStep['usage'];
    // Steps are read whole: the answer's text reaches a stream in one delta, after the tools ran.
    if (choice.message.content && !choice.message.tool_calls?.length) onContent?.(choice.message.content);
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
    deps.sealer,
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
  const sse = stream ? streamWriter(c, res, respId, created, () => answeredBy, open) : undefined;
  try {
    const result = await runManagedLoop({
      body: chatBody as Record<string, unknown> & { messages: ChatMessage[] },
      servers,
      callModel,
      charge: walletCharger(deps.wallet, { accountId: c.call.accountId, keyId: c.call.keyId }),
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
function streamWriter(
  c: ManagedCall,
  res: Response,
  respId: string,
  created: number,
  model: () => string,
  open: () => void,
) {
  if (c.route === 'chat') {
    let frames: ReturnType<typeof chatStreamFrames> | undefined;
    const get = () => (frames ??= chatStreamFrames({ id: respId, model: model(), created }));
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
  let seq = 0;
  let index = 0;
  const send = (type: string, fields: Record<string, unknown>) =>
    res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...fields })}\n\n`);
  let started = false;
  const start = () => {
    open();
    if (started) return;
    started = true;
    send('response.created', { response: responseObject(respId, created, c.body, model(), undefined) });
  };
  let text = '';
  const args = new Map<string, string>();
  return {
    event(e: LoopEvent) {
      start();
      if (e.type === 'content') text += e.delta;
      else if (e.type === 'tool_call') {
        args.set(e.call_id, e.arguments);
        const item = mcpCallItem({ ...e, output: '', is_error: false }, 'in_progress');
        send('response.output_item.added', { output_index: index, item });
        send('response.mcp_call_arguments.done', {
          output_index: index,
          item_id: item.id,
          arguments: e.arguments,
        });
      } else {
        const item = mcpCallItem({ ...e, arguments: args.get(e.call_id) ?? '{}' }, 'completed');
        send(e.is_error ? 'response.mcp_call.failed' : 'response.mcp_call.completed', {
          output_index: index,
          item_id: item.id,
        });
        send('response.output_item.done', { output_index: index, item });
        index++;
      }
    },
    end(result: LoopResult) {
      start();
      const final = responseObject(respId, created, c.body, result.final.model, result);
      const items = final.output.slice(result.toolCalls.length) as { type: string; id: string }[];
      for (const item of items) {
        if (item.type === 'message') {
          send('response.output_item.added', {
            output_index: index,
            item: messageItem(item.id, '', 'in_progress'),
          });
          const answer = result.final.message.content ?? text;
          if (answer)
            send('response.output_text.delta', {
              output_index: index,
              item_id: item.id,
              content_index: 0,
              delta: answer,
              logprobs: [],
            });
          send('response.output_text.done', {
            output_index: index,
            item_id: item.id,
            content_index: 0,
            text: answer,
            logprobs: [],
          });
        } else send('response.output_item.added', { output_index: index, item });
        send('response.output_item.done', { output_index: index, item });
        index++;
      }
      send('response.completed', { response: final });
      res.end('data: [DONE]\n\n');
    },
  };
}
