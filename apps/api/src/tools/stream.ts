// A managed loop streamed as chat-completion chunks, so the OpenAI SDKs read it as any chat stream:
// the answer's text arrives as `delta.content`; each managed tool call and its result arrive as a
// chunk with `choices: []` (as the usage chunk has) and a `berth_tool` object — SDKs pass unknown
// fields through, so a client that wants progress reads them and others ignore them. The last
// chunk carries the finish reason (and the client's own function calls, untouched), then
// `data: [DONE]`.
import type { LoopEvent, ModelStep } from './loop.ts';

export interface ChunkMeta {
  id: string;
  model: string;
  created: number;
}

export function chatStreamFrames(meta: ChunkMeta) {
  let roleSent = false;
  const frame = (body: Record<string, unknown>) =>
    `data: ${JSON.stringify({ id: meta.id, object: 'chat.completion.chunk', created: meta.created, model: meta.model, ...body })}\n\n`;
  const delta = (d: Record<string, unknown>, finish: string | null = null) => {
    const withRole = roleSent ? d : { role: 'assistant', ...d };
    roleSent = true;
    return frame({ choices: [{ index: 0, delta: withRole, logprobs: null, finish_reason: finish }] });
  };
  return {
    event(e: LoopEvent): string {
      if (e.type === 'content') return delta({ content: e.delta });
      return frame({ choices: [], berth_tool: e });
    },
    /** The finish chunk (with the client's own tool calls, if the model made some), usage, [DONE]. */
    end(
      final: ModelStep,
      usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number },
    ): string {
      const calls = final.message.tool_calls?.map((c, index) => ({ index, ...c }));
      return (
        delta(calls?.length ? { tool_calls: calls } : {}, final.finish_reason ?? 'stop') +
        (usage ? frame({ choices: [], usage }) : '') +
        'data: [DONE]\n\n'
      );
    },
  };
}
