// A catalog entry as the admin writes it (PUT /admin/models/{name}, BERTH_MODELS_FILE) and as the
// API shows it back: one zod schema, with messages that name the field to fix.
import { ENDPOINT_ID_MAX_LENGTH, ENDPOINT_ID_PREFIX, isEndpointId } from '@berth/crds';
import { z } from 'zod';
import { formatAmount, parseAmount, type TokenPricing } from '../platform/money.ts';

export const MODEL_KINDS = ['chat', 'completion', 'embedding'] as const;
export type ModelKind = (typeof MODEL_KINDS)[number];

export const KIND_NAME: Record<ModelKind, string> = {
  chat: 'a chat model',
  completion: 'a completion model',
  embedding: 'an embedding model',
};

/**
 * The kinds a model of `kind` may fall back to: a fallback answers on the routes the model serves. A
 * chat model is called on the chat routes (chat, responses) and text completions, so only a chat model
 * can stand in; a completion model only on text completions, which chat models serve too; an
 * embedding model only on embeddings.
 */
export const FALLBACK_KINDS: Record<ModelKind, readonly ModelKind[]> = {
  chat: ['chat'],
  completion: ['completion', 'chat'],
  embedding: ['embedding'],
};

/** Display names: what callers put in `model`; not an endpoint id, not Olympus's names. */
export const MODEL_NAME = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;
/** `model` values that ask Olympus to choose (olympus/choose.ts OLYMPUS_MODELS, which elastic cannot import). */
export const RESERVED = new Set(['auto', 'olympus', 'olympus-auto']);
export const modelName = z
  .string()
  .regex(
    MODEL_NAME,
    'must be 1-128 letters, digits, ".", "_", ":", "/" or "-", starting with a letter or digit',
  )
  .refine(
    (n) => !n.startsWith(ENDPOINT_ID_PREFIX),
    'must not start with "endpt-" (endpoint ids are callable as they are)',
  )
  .refine((n) => !RESERVED.has(n), 'is reserved for Olympus (auto, olympus, olympus-auto)');

const PRICE = 'must be a decimal string in USD per million tokens with at most 6 decimals, e.g. "0.10"';
const price = z.string({ error: PRICE }).refine((v) => parseAmount(v) !== undefined, PRICE);

const backend = z
  .object({
    endpoint: z
      .string()
      .refine(
        isEndpointId,
        `must be a dedicated endpoint id (${ENDPOINT_ID_PREFIX}…, a DNS label of at most ${ENDPOINT_ID_MAX_LENGTH} characters)`,
      )
      .optional(),
    baseUrl: z
      .url({ protocol: /^https?$/, error: 'must be an http(s) URL such as http://vllm.internal:8000/v1' })
      .optional(),
    model: z.string().min(1, 'must name the upstream model').optional(),
    apiKey: z.string().min(1).max(4096).optional(),
  })
  .strict()
  .superRefine((b, ctx) => {
    if (b.endpoint !== undefined) {
      if (b.baseUrl !== undefined || b.model !== undefined || b.apiKey !== undefined)
        ctx.addIssue({ code: 'custom', message: 'an endpoint backend has only "endpoint"' });
    } else if (b.baseUrl === undefined)
      ctx.addIssue({ code: 'custom', message: 'needs "endpoint" (endpt-…) or "baseUrl" with "model"' });
    else if (b.model === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['model'],
        message: 'is required with baseUrl (the upstream model name)',
      });
  });

export const entryBody = z
  .object({
    kind: z.enum(MODEL_KINDS, { error: 'must be "chat", "completion" or "embedding"' }),
    backends: z.array(backend).min(1, 'needs at least one backend').max(16),
    pricing: z.object({ inputPerMTok: price, outputPerMTok: price }).strict(),
    contextLength: z.number().int().positive().max(10_000_000).optional(),
    fallbacks: z.array(modelName).max(8).default([]),
  })
  .strict();
export type EntryBody = z.infer<typeof entryBody>;

/** A backend as stored: the API key sealed (platform/sealed.ts). */
export type StoredBackend = { endpoint: string } | { baseUrl: string; model: string; secret?: string };

/** A backend as served from memory: the API key opened. */
export type Backend = { endpoint: string } | { baseUrl: string; model: string; apiKey?: string };

export interface CatalogModel {
  name: string;
  kind: ModelKind;
  pricing: TokenPricing;
  contextLength?: number;
  fallbacks: readonly string[];
  backends: readonly Backend[];
  updatedAt: Date;
}

/** What GET /admin/models shows: never a secret, only that one is set. */
export function adminView(m: CatalogModel) {
  return {
    name: m.name,
    kind: m.kind,
    backends: m.backends.map((b) =>
      'endpoint' in b
        ? { endpoint: b.endpoint }
        : { baseUrl: b.baseUrl, model: b.model, ...(b.apiKey ? { secret: 'set' as const } : {}) },
    ),
    pricing: {
      inputPerMTok: formatAmount(m.pricing.inputPerMTok),
      outputPerMTok: formatAmount(m.pricing.outputPerMTok),
    },
    contextLength: m.contextLength ?? null,
    fallbacks: m.fallbacks,
    updatedAt: m.updatedAt.toISOString(),
  };
}

export const adminModel = z.object({
  name: z.string(),
  kind: z.enum(MODEL_KINDS),
  backends: z.array(
    z.union([
      z.object({ endpoint: z.string() }),
      z.object({ baseUrl: z.string(), model: z.string(), secret: z.literal('set').optional() }),
    ]),
  ),
  pricing: z.object({ inputPerMTok: z.string(), outputPerMTok: z.string() }),
  contextLength: z.number().int().nullable(),
  fallbacks: z.array(z.string()),
  updatedAt: z.string(),
});
