import { z } from 'zod';
import type { KeyRecord } from '../repositories/keys.ts';
import { SCOPES } from '../repositories/keys.ts';
import type { CreatedKey } from '../keys/service.ts';
import { simpleError } from '../openapi.ts';
import { humanName } from '../http/validate.ts';

/** Settings → Keys and Settings → Billing: a global key, or the dashboard's session. */
export const globalKey = { scopes: ['global'], session: 'manage' } as const;
export const globalKeyErrors = {
  401: { description: 'Missing, malformed or revoked key', schema: simpleError },
  403: { description: 'The key is not a global key', schema: simpleError },
};

export const keyView = z.object({
  id: z.string().describe('Key id (`key_…`), used to revoke it'),
  name: z.string(),
  scope: z.enum(SCOPES),
  prefix: z.string().describe('The first characters of the value; the value itself is never shown again'),
  pinnedModel: z.string().nullable(),
  toolPin: z.array(z.string()),
  state: z.enum(['active', 'revoked']),
  createdAt: z.string().describe('ISO 8601'),
  lastUsedAt: z
    .string()
    .nullable()
    .describe('ISO 8601; written in batches, up to KEY_TOUCH_INTERVAL_MS late'),
  revokedAt: z.string().nullable(),
});
export const createdKeyView = keyView.extend({
  value: z.string().describe('The key: shown in this response only'),
});

export function viewKey(k: KeyRecord): z.infer<typeof keyView> {
  return {
    id: k.id,
    name: k.name,
    scope: k.scope,
    prefix: k.prefix,
    pinnedModel: k.pinnedModel,
    toolPin: k.toolPin,
    state: k.revokedAt ? 'revoked' : 'active',
    createdAt: k.createdAt.toISOString(),
    lastUsedAt: k.lastUsedAt?.toISOString() ?? null,
    revokedAt: k.revokedAt?.toISOString() ?? null,
  };
}

export function viewCreatedKey(k: CreatedKey): z.infer<typeof createdKeyView> {
  return { ...viewKey(k), value: k.value };
}

export const toolId = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'must be a tool id such as "olympus"');

/** The body that creates a key, shared by the admin route and POST /api/keys. */
export const createKeyBody = z
  .strictObject({
    name: humanName(100),
    scope: z.enum(SCOPES, { error: 'must be one of "inference", "compute", "global"' }),
    pinnedModel: z
      .string()
      .trim()
      .min(1)
      .max(200)
      .nullish()
      .describe('Only on inference keys: overrides `model` on /api/b/chat/completions'),
    toolPin: z
      .array(toolId)
      .max(32)
      .optional()
      .describe('Tools this key may use; empty or absent: every tool enabled for the account'),
  })
  .refine((b) => !b.pinnedModel || b.scope === 'inference', {
    message: 'is only allowed on keys with scope "inference"',
    path: ['pinnedModel'],
  });

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
