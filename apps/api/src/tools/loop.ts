// The managed tool loop: model → tool calls → MCP tools/call → results back to the model → … until
// the model answers, the step limit (then one last call with tool_choice "none", so it answers with
// what it has), or the wall clock (the request's signal). The model call is injected: the Elastic
// routes pass "call this catalog model with these messages and tools" (token billing is theirs);
// each tool call is reserved and settled here at the tool's price.
//
// - Client-side function tools pass through untouched: a turn that calls one ends the loop and is
//   returned to the client as the model wrote it.
// - A tool server that fails, times out, or is given arguments that are not JSON gives the model an
//   error text as the result (not charged); a server that cannot even be listed is named to the
//   model in a system message. None of it is a 500.
// - The request's `max_tokens` bounds each model call of the loop (every step generates at most
//   that many tokens), not the loop's total. A step that `max_tokens` cut while the model was
//   writing a tool call ends the loop with finish_reason "length" and the text before the call:
//   the half-written call is neither run nor handed to the client as an answer.
import { ApiError } from '../platform/errors.ts';
import type { McpResult, McpSession, McpToolInfo } from './mcp.ts';

export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface ChatMessage {
  role: string;
  content?: unknown;
  tool_calls?: ChatToolCall[];
  tool_call_id?: string;
  [field: string]: unknown;
}

export interface FunctionTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: unknown };
}

export interface ModelStep {
  message: { role: 'assistant'; content: string | null; tool_calls?: ChatToolCall[] };
  finish_reason: string | null;
  usage?: { prompt_tokens: number; completion_tokens: number };
  model: string;
}

/** One model call: the client's body with `messages`, `tools` and `tool_choice` set by the loop. */
export type CallModel = (body: Record<string, unknown>, ctx: { signal: AbortSignal }) => Promise<ModelStep>;

/**
 * Where the tool-call syntaxes of the chat templates vLLM's tool parsers read begin: Hermes/Qwen,
 * Mistral, Llama 3.x, DeepSeek, Granite. A step cut by `max_tokens` after one of these
 * left a call the parser could not read, as raw text.
 */
const TOOL_CALL_OPENERS = [
  '<tool_call>',
  '[TOOL_CALLS]',
  '<|python_tag|>',
  '<function=',
  '<｜tool▁calls▁begin｜>',
  '<|tool_call|>',
];

/** The text of a step cut by max_tokens, without the tool call it was writing (unchanged if none). */
export function withoutCutToolCall(content: string): string {
  let cut = -1;
  for (const opener of TOOL_CALL_OPENERS) {
    const i = content.indexOf(opener);
    if (i !== -1 && (cut === -1 || i < cut)) cut = i;
  }
  return cut === -1 ? content : content.slice(0, cut).trimEnd();
}

/** A managed tool's MCP server, opened for this request. */
export interface ManagedServer {
  toolId: string;
  pricePerCall: bigint;
  /** The open session, or why it could not be opened. */
  session: McpSession | { error: string };
  /** Only these of its tools (the Responses API's `allowed_tools`); undefined: all. */
  allowedTools?: readonly string[];
}

/** Reserves one call's price; null when the balance is too low (the loop then ends with 402). */
export type ChargeTool = (
  toolId: string,
  price: bigint,
) => Promise<{ settle(): void; release(): void } | null>;

export type LoopEvent =
  | { type: 'content'; delta: string }
  | { type: 'tool_call'; call_id: string; server_label: string; name: string; arguments: string }
  | {
      type: 'tool_result';
      call_id: string;
      server_label: string;
      name: string;
      output: string;
      is_error: boolean;
    };

export interface LoopResult {
  final: ModelStep;
  /** Every managed call, in order (the Responses API lists them as `mcp_call` items). */
  toolCalls: {
    call_id: string;
    server_label: string;
    name: string;
    arguments: string;
    output: string;
    is_error: boolean;
  }[];
  modelCalls: number;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

export interface LoopInput {
  body: Record<string, unknown> & { messages: ChatMessage[] };
  servers: ManagedServer[];
  callModel: CallModel;
  charge: ChargeTool;
  maxSteps: number;
  /** Aborts on the wall clock, a client disconnect or a revoked key; its reason is rethrown. */
  signal: AbortSignal;
  onEvent?: (e: LoopEvent) => void;
}

/** The functions the model is offered for the managed servers; 400 when two names collide. */
export function managedFunctions(
  servers: readonly ManagedServer[],
  clientTools: readonly FunctionTool[],
): Map<string, { server: ManagedServer; tool: McpToolInfo }> {
  const byName = new Map<string, { server: ManagedServer; tool: McpToolInfo }>();
  const taken = new Set(clientTools.map((t) => t.function.name));
  for (const server of servers) {
    if ('error' in server.session) continue;
    for (const tool of server.session.tools) {
      if (server.allowedTools && !server.allowedTools.includes(tool.name)) continue;
      const other = byName.get(tool.name)?.server.toolId;
      if (taken.has(tool.name) || other)
        throw new ApiError('validation_error', {
          message: `Tool name "${tool.name}" of managed tool "${server.toolId}" is also ${other ? `a tool of "${other}"` : 'a function tool of the request'}; use allowed_tools to leave one out`,
          param: 'tools',
        });
      byName.set(tool.name, { server, tool });
    }
  }
  return byName;
}

export async function runManagedLoop(input: LoopInput): Promise<LoopResult> {
  const { body, servers, callModel, signal } = input;
  const emit = input.onEvent ?? (() => {});
  const clientTools = (Array.isArray(body.tools) ? body.tools : []) as FunctionTool[];
  const managed = managedFunctions(servers, clientTools);
  const tools: FunctionTool[] = [
    ...clientTools,
    ...[...managed].map(([name, { tool }]) => ({
      type: 'function' as const,
      function: {
        name,
        ...(tool.description ? { description: tool.description } : {}),
        parameters: tool.inputSchema,
      },
    })),
  ];
  const unavailable = servers.filter(
    (s): s is ManagedServer & { session: { error: string } } => 'error' in s.session,
  );
  const messages: ChatMessage[] = [
    ...(unavailable.length
      ? [
          {
            role: 'system',
            content: unavailable
              .map((s) => `Managed tool "${s.toolId}" is unavailable: ${s.session.error}`)
              .join('\n'),
          },
        ]
      : []),
    ...body.messages,
  ];
  const result: LoopResult = {
    final: undefined as unknown as ModelStep,
    toolCalls: [],
    modelCalls: 0,
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
  };
  for (;;) {
    if (signal.aborted) throw signal.reason;
    const last = result.modelCalls >= input.maxSteps - 1;
    const step = await callModel(
      {
        ...body,
        messages,
        ...(tools.length ? { tools, tool_choice: last ? 'none' : (body.tool_choice ?? 'auto') } : {}),
      },
      { signal },
    );
    result.modelCalls++;
    if (tools.length && step.finish_reason === 'length' && !step.message.tool_calls?.length) {
      const content = withoutCutToolCall(step.message.content ?? '');
      if (content !== step.message.content) step.message = { ...step.message, content };
    }
    result.final = step;
    if (step.usage) {
      result.usage.prompt_tokens += step.usage.prompt_tokens;
      result.usage.completion_tokens += step.usage.completion_tokens;
      result.usage.total_tokens += step.usage.prompt_tokens + step.usage.completion_tokens;
    }
    const calls = step.message.tool_calls ?? [];
    // Steps are read whole: the answer's text reaches a stream in one delta, after the tools ran.
    if (calls.length === 0 && step.message.content) emit({ type: 'content', delta: step.message.content });
    if (calls.length === 0 || calls.some((c) => !managed.has(c.function.name))) return result;

    messages.push(step.message);
    for (const call of calls) {
      const { server } = managed.get(call.function.name)!;
      const name = call.function.name;
      emit({
        type: 'tool_call',
        call_id: call.id,
        server_label: server.toolId,
        name,
        arguments: call.function.arguments,
      });
      const outcome = await callTool(server, name, call.function.arguments, input.charge, signal);
      const record = {
        call_id: call.id,
        server_label: server.toolId,
        name,
        arguments: call.function.arguments,
        output: outcome.text,
        is_error: outcome.isError,
      };
      result.toolCalls.push(record);
      emit({ type: 'tool_result', ...record });
      messages.push({ role: 'tool', tool_call_id: call.id, content: outcome.text });
    }
  }
}

async function callTool(
  server: ManagedServer,
  name: string,
  rawArgs: string,
  charge: ChargeTool,
  signal: AbortSignal,
): Promise<McpResult> {
  let args: unknown;
  try {
    args = rawArgs.trim() === '' ? {} : JSON.parse(rawArgs);
  } catch {
    return { text: 'Error: the arguments are not valid JSON', isError: true, answered: false };
  }
  if (typeof args !== 'object' || args === null || Array.isArray(args))
    return { text: 'Error: the arguments must be a JSON object', isError: true, answered: false };
  const hold = await charge(server.toolId, server.pricePerCall);
  if (!hold) throw new ApiError('insufficient_balance');
  let outcome: McpResult | undefined;
  try {
    outcome = await (server.session as McpSession).call(name, args as Record<string, unknown>, signal);
    return outcome;
  } finally {
    if (outcome?.answered) hold.settle();
    else hold.release();
  }
}
