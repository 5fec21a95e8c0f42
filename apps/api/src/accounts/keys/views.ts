import { z } from 'zod';
import { formatAmount, MAX_BALANCE, parseAmount } from '../../platform/money.ts';
import { SPEND_PERIODS, type KeyRecord, type KeySpend } from './repository.ts';
import { SCOPES } from '../../http/principal.ts';
import type { CreatedKey } from './service.ts';
import { humanName } from '../../http/validate.ts';
import { MAX_GRACE_SECONDS } from './lifecycle.ts';
import { keyDeadline } from './verify.ts';

export const KEY_STATES = ['active', 'revoked', 'expired', 'rotated'] as const;

const spendLimitView = z
  .object({
    amount: z.string().describe('Decimal string, six decimals'),
    period: z.enum(SPEND_PERIODS).describe('UTC day, ISO week from Monday 00:00 UTC, or calendar month'),
    spent: z
      .string()
      .describe(
        'Charged to the key (and the keys it was rotated from) this period; up to a billing flush late',
      ),
    periodStart: z.string().describe('ISO 8601'),
    resetsAt: z.string().describe('ISO 8601: the next period starts'),
  })
  .describe('At most `amount` per period; calls past it answer 402 `spend_limit_reached`');

export const keyView = z.object({
  id: z.string().describe('Key id (`key_…`), used to revoke it'),
  name: z.string(),
  scope: z.enum(SCOPES),
  prefix: z.string().describe('The first characters of the value; the value itself is never shown again'),
  pinnedModel: z.string().nullable(),
  toolPin: z.array(z.string()),
  state: z
    .enum(KEY_STATES)
    .describe(
      '`active` works (a rotated key works until `graceExpiresAt`); `revoked`, `expired` and `rotated` are refused with 401 and that code',
    ),
  createdAt: z.string().describe('ISO 8601'),
  lastUsedAt: z
    .string()
    .nullable()
    .describe('ISO 8601; written in batches, up to KEY_TOUCH_INTERVAL_MS late'),
  revokedAt: z.string().nullable(),
  expiresAt: z.string().nullable().describe('ISO 8601: refused from then on (null: never)'),
  replacedBy: z.string().nullable().describe('The key this one was rotated to'),
  graceExpiresAt: z.string().nullable().describe('ISO 8601: a rotated key works until then'),
  rotatedFrom: z.string().nullable().describe('The key this one replaced'),
  spendLimit: spendLimitView.nullable(),
  allowDearerFallback: z
    .boolean()
    .describe('Elastic fallbacks may go to catalog models priced above the one asked for'),
});
export const createdKeyView = keyView.extend({
  value: z.string().describe('The key: shown in this response only'),
});
export const rotatedKeyView = createdKeyView.extend({
  previous: keyView.describe('The key it replaced, working until its `graceExpiresAt`'),
});

/** A key's state at `now`. */
export function keyState(k: KeyRecord, now: Date): (typeof KEY_STATES)[number] {
  if (k.revokedAt) return 'revoked';
  const deadline = keyDeadline(k);
  if (deadline && now.getTime() >= deadline.at)
    return deadline.code === 'api_key_rotated' ? 'rotated' : 'expired';
  return 'active';
}

export function viewKey(k: KeyRecord, now = new Date(), spend?: KeySpend): z.infer<typeof keyView> {
  return {
    id: k.id,
    name: k.name,
    scope: k.scope,
    prefix: k.prefix,
    pinnedModel: k.pinnedModel,
    toolPin: k.toolPin,
    state: keyState(k, now),
    createdAt: k.createdAt.toISOString(),
    lastUsedAt: k.lastUsedAt?.toISOString() ?? null,
    revokedAt: k.revokedAt?.toISOString() ?? null,
    expiresAt: k.expiresAt?.toISOString() ?? null,
    replacedBy: k.replacedBy,
    graceExpiresAt: k.graceExpiresAt?.toISOString() ?? null,
    rotatedFrom: k.rotatedFrom,
    spendLimit: k.spendLimit
      ? {
          amount: formatAmount(k.spendLimit.amount),
          period: k.spendLimit.period,
          spent: formatAmount(spend?.spent ?? 0n),
          periodStart: spend?.periodStart.toISOString() ?? '',
          resetsAt: spend?.periodEnd.toISOString() ?? '',
        }
      : null,
    allowDearerFallback: k.allowDearerFallback,
  };
}

export function viewCreatedKey(
  k: CreatedKey,
  now = new Date(),
  spend?: KeySpend,
): z.infer<typeof createdKeyView> {
  return { ...viewKey(k, now, spend), value: k.value };
}

export const toolId = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'must be a tool id such as "olympus"');

const AMOUNT = 'must be a decimal string with at most 6 decimals, e.g. "10.00" ("0": no paid calls)';
const limitAmount = z
  .string({ error: AMOUNT })
  .refine((v) => {
    const a = parseAmount(v);
    return a !== undefined && a <= MAX_BALANCE;
  }, AMOUNT)
  .transform((v) => parseAmount(v)!);

const settings = {
  pinnedModel: z
    .string()
    .trim()
    .min(1)
    .max(200)
    .nullish()
    .describe(
      'Only on inference keys: overrides `model` on /api/b/chat/completions. A catalog chat model, one of the account’s dedicated endpoints, or `auto`',
    ),
  toolPin: z
    .array(toolId)
    .max(32)
    .optional()
    .describe('Tools this key may use; empty or absent: every tool enabled for the account'),
  expiresAt: z.iso
    .datetime({ offset: true, error: 'must be an ISO 8601 time such as 2026-12-31T00:00:00Z' })
    .transform((v) => new Date(v))
    .nullish()
    .describe('The key is refused from then on (401 `api_key_expired`); null: never'),
  spendLimit: z
    .strictObject({
      amount: limitAmount,
      period: z.enum(SPEND_PERIODS, { error: 'must be "day", "week" or "month"' }),
    })
    .nullish()
    .describe(
      'At most `amount` charged per period through this key (and the keys it is rotated to); null: none',
    ),
  allowDearerFallback: z
    .boolean({ error: 'must be true or false' })
    .optional()
    .describe(
      'Elastic fallbacks may go to catalog models priced above the one asked for (a request may say `allow_dearer_fallback`)',
    ),
};

/** The body that creates a key, shared by the admin route and POST /api/keys. */
export const createKeyBody = z
  .strictObject({
    name: humanName(100),
    scope: z.enum(SCOPES, { error: 'must be one of "inference", "compute", "global"' }),
    ...settings,
  })
  .refine((b) => !b.pinnedModel || b.scope === 'inference', {
    message: 'is only allowed on keys with scope "inference"',
    path: ['pinnedModel'],
  });

/** PATCH /api/keys/{id}: the fields given change, the others stay. */
export const updateKeyBody = z
  .strictObject({ name: humanName(100).optional(), ...settings })
  .refine((b) => Object.keys(b).length > 0, { message: 'name at least one field to change' });

/** POST /api/keys/{id}/rotate. */
export const rotateKeyBody = z.strictObject({
  gracePeriodSeconds: z
    .int({ error: 'must be a whole number of seconds' })
    .min(0, 'must be 0 or more (0: the old key is refused at once)')
    .max(MAX_GRACE_SECONDS, `must be at most ${MAX_GRACE_SECONDS} (30 days)`)
    .optional()
    .describe('How long the old key keeps working; default 86400 (24 h), at most 30 days'),
  expiresAt: settings.expiresAt,
});
