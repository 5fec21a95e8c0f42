// The Responses API as a managed tool loop sees it (./answer.ts): `instructions` and `input` as chat
// messages, and the loop's result back as a Responses object with `mcp_call` items, whole or
// streamed as typed events.
import { randomBytes } from 'node:crypto';
import type { Response } from 'express';
import { invalidBody } from '../http/validate.ts';
import type { ChatMessage, LoopEvent, LoopResult } from './loop.ts';

/**
 * Where a managed request's stream goes: the response, the answer's id and creation time, the model
 * that answers (known once a step ran), and `open`, which sends the headers at the first event.
 */
export interface StreamTarget {
  res: Response;
  id: string;
  created: number;
  model(): string;
  open(): void;
}

/** Writes one managed request's events, then its end (the route's stream format). */
export interface StreamWriter {
  event(e: LoopEvent): void;
  end(result: LoopResult): void;
}

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
      else throw invalidBody('this input item type is not supported with managed tools', `input.${i}`);
    });
  else throw invalidBody('must be a string or a list of input items', 'input');
  const tools = others.map((t, i) => {
    const f = t as { type?: string; name?: unknown; description?: unknown; parameters?: unknown };
    if (f?.type !== 'function' || typeof f.name !== 'string')
      throw invalidBody('only function tools and managed (mcp) tools can be combined', `tools.${i}`);
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

export const id = (prefix: string) => prefix + randomBytes(12).toString('hex');

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

export function responseObject(
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

/** A managed request's Responses stream: typed events, `mcp_call` items as the tools run. */
export function responsesStreamWriter(body: Record<string, unknown>, to: StreamTarget): StreamWriter {
  const { res, id: respId, created, model, open } = to;
  let seq = 0;
  let index = 0;
  const send = (type: string, fields: Record<string, unknown>) =>
    res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...fields })}\n\n`);
  let started = false;
  const start = () => {
    open();
    if (started) return;
    started = true;
    send('response.created', { response: responseObject(respId, created, body, model(), undefined) });
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
      const final = responseObject(respId, created, body, result.final.model, result);
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
