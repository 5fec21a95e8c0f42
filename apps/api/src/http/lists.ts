// Cursor pagination of list routes, as OpenAI's list routes do it.
import { z } from 'zod';

/** Cursor pagination as OpenAI's list routes do it: `limit`, then `after` = the last id of a page. */
export const LIST_LIMIT_MAX = 100;
export const listQuery = z.strictObject({
  limit: z.coerce
    .number({ error: 'must be a number' })
    .int('must be a whole number')
    .min(1, `must be between 1 and ${LIST_LIMIT_MAX}`)
    .max(LIST_LIMIT_MAX, `must be between 1 and ${LIST_LIMIT_MAX}`)
    .default(LIST_LIMIT_MAX)
    .describe(`How many items a page holds, 1–${LIST_LIMIT_MAX} (default ${LIST_LIMIT_MAX})`),
  after: z
    .string()
    .min(1, 'must not be empty')
    .max(200)
    .optional()
    .describe('The `last_id` of the previous page: this page starts after that item'),
});

/** One page of a list: `{"object": "list", "data", "has_more", "first_id", "last_id"}`. */
export function listPage<T extends z.ZodType>(item: T) {
  return z.object({
    object: z.literal('list'),
    data: z.array(item),
    has_more: z.boolean().describe('Whether another page follows: ask for it with `after` = `last_id`'),
    first_id: z.string().nullable().describe('Id of the first item; null on an empty page'),
    last_id: z.string().nullable().describe('Id of the last item; null on an empty page'),
  });
}

export function pageOf<T extends { id: string }>(data: T[], hasMore: boolean) {
  return {
    object: 'list' as const,
    data,
    has_more: hasMore,
    first_id: data[0]?.id ?? null,
    last_id: data.at(-1)?.id ?? null,
  };
}
