// The affinity key of a call: a hash of its prompt's leading part, the same for every turn of one
// conversation. For chat (and Responses input items) that is every message up to and including the
// first user message, PREFIX_CHARS of each: a conversation keeps it as it grows turn by turn, while
// conversations that share only a system prompt get different keys (and spread; each replica caches
// the shared system prompt once). For a plain completion prompt it is the prompt's first PREFIX_CHARS.
import { avalanche, hashString, NO_KEY } from './replicas.ts';

/** Characters of each leading message (or of a completion prompt) that make the key. */
export const PREFIX_CHARS = 256;

const FNV_PRIME = 0x01000193;

/** The affinity key of an OpenAI request body (chat, completions, Responses), or NO_KEY. */
export function affinityKey(body: Record<string, unknown> | undefined): number {
  if (!body) return NO_KEY;
  const { messages, prompt, input, instructions } = body;
  if (Array.isArray(messages)) return leadingMessages(messages, 0x811c9dc5);
  if (typeof prompt === 'string') return hashString(prompt, PREFIX_CHARS);
  if (Array.isArray(prompt) && typeof prompt[0] === 'string') return hashString(prompt[0], PREFIX_CHARS);
  const seed = typeof instructions === 'string' ? hashString(instructions, PREFIX_CHARS) : 0x811c9dc5;
  if (typeof input === 'string') return mix(seed, hashString(input, PREFIX_CHARS));
  if (Array.isArray(input)) return leadingMessages(input, seed);
  return NO_KEY;
}

function leadingMessages(messages: unknown[], seed: number): number {
  let h = seed;
  let any = false;
  for (const m of messages) {
    if (typeof m !== 'object' || m === null) break;
    const { role, content } = m as { role?: unknown; content?: unknown };
    const text = contentText(content);
    if (text !== undefined) {
      h = mix(h, hashString(text, PREFIX_CHARS));
      any = true;
    }
    if (role === 'user') break;
  }
  return any ? h : NO_KEY;
}

/** A message's text: the string, or its first text part (no concatenation on the hot path). */
function contentText(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return undefined;
  for (const part of content) {
    const text = (part as { text?: unknown } | null)?.text;
    if (typeof text === 'string') return text;
  }
  return undefined;
}

function mix(h: number, v: number): number {
  return avalanche(Math.imul(h ^ v, FNV_PRIME));
}
