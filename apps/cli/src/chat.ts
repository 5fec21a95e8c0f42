// berth chat: one user message, the answer streamed to standard output as it arrives. A dedicated
// endpoint (its `endpt-…` id) is called at /api/d/{id}/chat/completions; anything else is a model of
// the Elastic catalog (berth models list; `auto` lets Olympus choose) at /api/chat/completions.
import { ApiFailure, type Client } from './client.ts';

const ENDPOINT_ID = /^endpt-/;

export interface ChatTarget {
  path: string;
  /** The catalog model; a dedicated endpoint serves one model and needs none. */
  model?: string;
}

export function chatTarget(target: { endpoint?: string; model?: string }): ChatTarget {
  if (target.model !== undefined) return { path: '/api/chat/completions', model: target.model };
  const name = target.endpoint!;
  if (ENDPOINT_ID.test(name)) return { path: `/api/d/${encodeURIComponent(name)}/chat/completions` };
  return { path: '/api/chat/completions', model: name };
}

/** Writes the content of each SSE frame as it comes; an error frame (after the first byte) throws. */
export async function streamChat(
  client: Client,
  target: ChatTarget,
  prompt: string,
  maxTokens: number,
  out: NodeJS.WritableStream = process.stdout,
): Promise<void> {
  const res = await client.raw('post', target.path, {
    ...(target.model !== undefined ? { model: target.model } : {}),
    messages: [{ role: 'user', content: prompt }],
    stream: true,
    max_tokens: maxTokens,
  });
  let buffer = '';
  for await (const chunk of res.body!.pipeThrough(new TextDecoderStream())) {
    buffer += chunk;
    let nl: number;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      if (data === '[DONE]') return void out.write('\n');
      const frame = JSON.parse(data) as {
        error?: { message: string; code?: string };
        choices?: { delta?: { content?: string } }[];
      };
      if (frame.error) throw new ApiFailure(500, frame.error.message, frame.error.code);
      out.write(frame.choices?.[0]?.delta?.content ?? '');
    }
  }
  out.write('\n');
}
