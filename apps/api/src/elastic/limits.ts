// What bounds an OpenAI-style request's generation, read the way the engine reads it. vLLM obeys
// `max_completion_tokens` before `max_tokens` on chat, and `max_output_tokens` on Responses; a
// request may carry several, so the bound is the largest it gives (never the smaller one the engine
// then ignores). `n` and `best_of` multiply it: each sequence generates up to the limit.

const LIMIT_FIELDS = ['max_tokens', 'max_completion_tokens', 'max_output_tokens'] as const;
const SEQUENCE_FIELDS = ['n', 'best_of'] as const;

const count = (v: unknown): number | undefined =>
  typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined;

/**
 * The most tokens one sequence may generate (absent when the request sets no limit: the model's
 * context bounds it), and how many sequences are generated.
 */
export function generationLimit(body: Record<string, unknown>): { maxTokens?: number; sequences: number } {
  let maxTokens: number | undefined;
  for (const k of LIMIT_FIELDS) {
    const v = count(body[k]);
    if (v !== undefined) maxTokens = Math.max(maxTokens ?? 0, v);
  }
  let sequences = 1;
  for (const k of SEQUENCE_FIELDS) sequences = Math.max(sequences, count(body[k]) ?? 1);
  return { ...(maxTokens !== undefined ? { maxTokens } : {}), sequences };
}
