// Olympus's builder routes (spec §4: optional, dual error shape): the account's routing policy.
import { z } from 'zod';
import type { Routes } from '../http/routes.ts';
import { openaiError } from '../http/openapi.ts';
import type { OlympusPolicyRecord, OlympusRepository } from './repository.ts';
import { chooseModel, type OlympusDeps, OLYMPUS_HEADER, OLYMPUS_MODELS } from './choose.ts';
import type { ElasticCatalog } from '../elastic/catalog.ts';
import type { ModelKind } from '../elastic/entry.ts';
import { ApiError } from '../platform/errors.ts';
import { DEFAULT_ROUTE_THRESHOLD } from './repository.ts';
import { ROUTE_OUTCOMES, type RouteOutcome } from './routing.ts';

const modelName = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/, 'must be a catalog model name');

export const policyBody = z
  .strictObject({
    allowed_models: z
      .array(modelName)
      .max(100, 'must list at most 100 models')
      .default([])
      .describe('Models Olympus may choose; empty: every catalog model'),
    objective: z
      .enum(['cost', 'latency', 'quality'], { error: 'must be one of "cost", "latency", "quality"' })
      .default('cost'),
    routes: z
      .array(
        z.strictObject({
          name: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'must be a route name such as "code"'),
          model: modelName,
          examples: z
            .array(z.string().trim().min(1, 'must not be empty').max(4000, 'must be at most 4000 characters'))
            .min(1, 'must have at least one example prompt')
            .max(50, 'must have at most 50 example prompts'),
        }),
      )
      .max(20, 'must have at most 20 routes')
      .default([])
      .refine((r) => new Set(r.map((x) => x.name)).size === r.length, 'must have distinct names')
      .describe(
        'Prompts like these examples go to that model (embedding similarity of the last user message)',
      ),
    route_threshold: z
      .number({ error: 'must be a number from 0 to 1' })
      .min(0, 'must be a number from 0 to 1')
      .max(1, 'must be a number from 0 to 1')
      .default(DEFAULT_ROUTE_THRESHOLD)
      .describe(
        "Cosine similarity a prompt needs to one of a route's examples to take that route (depends on the embedding model)",
      ),
    embedding_model: modelName
      .nullable()
      .default(null)
      .describe('The catalog embedding model routes are matched with; null: the cheapest one'),
  })
  .superRefine((p, ctx) => {
    if (!p.allowed_models.length) return;
    p.routes.forEach((r, i) => {
      if (!p.allowed_models.includes(r.model))
        ctx.addIssue({
          code: 'custom',
          path: ['routes', i, 'model'],
          message: 'must be one of allowed_models',
        });
    });
  })
  .describe('Olympus policy');

const policyView = z.object({
  allowed_models: z.array(z.string()),
  objective: z.enum(['cost', 'latency', 'quality']),
  routes: z.array(z.object({ name: z.string(), model: z.string(), examples: z.array(z.string()) })),
  route_threshold: z.number(),
  embedding_model: z.string().nullable(),
  updated_at: z.string().nullable(),
});

const tokens = z
  .number({ error: 'must be a whole number of tokens' })
  .int('must be a whole number of tokens')
  .min(0, 'must be at least 0')
  .optional();

const ROUTE_KINDS: Record<string, readonly ModelKind[]> = {
  'chat/completions': ['chat'],
  completions: ['completion', 'chat'],
  responses: ['chat'],
};

const CHAT_ROLES = ['system', 'developer', 'user', 'assistant', 'tool', 'function'] as const;
const chatMessage = z.looseObject({
  role: z.enum(CHAT_ROLES, { error: `must be one of ${CHAT_ROLES.map((r) => `"${r}"`).join(', ')}` }),
  content: z
    .union([z.string(), z.array(z.unknown()), z.null()], {
      error: 'must be a string, an array of parts or null',
    })
    .optional(),
});

/** The field that carries the prompt on each Elastic route, as the live route (and the engine) needs it. */
const PROMPT_FIELD = { 'chat/completions': 'messages', completions: 'prompt', responses: 'input' } as const;

export const routeBody = z
  .looseObject({
    endpoint: z
      .enum(['chat/completions', 'completions', 'responses'], {
        error: 'must be one of "chat/completions", "completions", "responses"',
      })
      .default('chat/completions')
      .describe('The Elastic route the request would go to'),
    model: z
      .enum(OLYMPUS_MODELS, {
        error:
          'must be "auto", "olympus" or "olympus-auto" (the dry run shows what Olympus chooses), or left out',
      })
      .optional(),
    messages: z
      .array(chatMessage, { error: 'must be an array of messages' })
      .min(1, 'must have at least one message')
      .optional()
      .describe('chat/completions: the conversation, as the live route takes it'),
    prompt: z
      .union([z.string(), z.array(z.string()).min(1, 'must not be empty')], {
        error: 'must be a string or an array of strings',
      })
      .optional()
      .describe('completions: the prompt'),
    input: z
      .union([z.string(), z.array(z.unknown()).min(1, 'must not be empty')], {
        error: 'must be a string or an array of input items',
      })
      .optional()
      .describe('responses: the input'),
    max_tokens: tokens,
    max_completion_tokens: tokens,
    max_output_tokens: tokens,
    tools: z.array(z.unknown(), { error: 'must be an array' }).optional(),
    stream: z.boolean({ error: 'must be true or false' }).optional(),
  })
  .superRefine((b, ctx) => {
    const field = PROMPT_FIELD[b.endpoint];
    if (b[field] === undefined)
      ctx.addIssue({ code: 'custom', path: [field], message: `is required for endpoint "${b.endpoint}"` });
  })
  .describe(
    'The body you would send to the Elastic route (`messages`, `prompt` or `input` as the route needs, …), plus `endpoint`; `model` may be left out',
  );

const routeView = z.object({
  model: z.string().describe('The catalog model Olympus would call now'),
  reason: z
    .string()
    .describe(
      '`route:<name>` (a route matched), `cheapest`, `fastest`, `best`, `fallback` (the first choice is cooling down, must wake, or is a matched route’s model that cannot take the call)',
    ),
  objective: z.enum(['cost', 'latency', 'quality']),
  considered: z.array(z.string()).describe('The catalog models that fit the request and the policy'),
  routing: z
    .object({
      outcome: z
        .enum(ROUTE_OUTCOMES as [RouteOutcome, ...RouteOutcome[]])
        .describe('`matched`, or why no route decided'),
      embedding_model: z.string().nullable(),
      nearest: z
        .object({ name: z.string(), model: z.string(), similarity: z.number() })
        .nullable()
        .describe('The closest route and its best cosine similarity (also below the threshold)'),
    })
    .nullable()
    .describe('How the policy’s routes were matched (one embedding call, not charged); null without routes'),
});

function view(p: OlympusPolicyRecord): z.infer<typeof policyView> {
  return {
    allowed_models: p.allowedModels,
    objective: p.objective,
    routes: p.routes,
    route_threshold: p.routeThreshold,
    embedding_model: p.embeddingModel,
    updated_at: p.updatedAt?.toISOString() ?? null,
  };
}

/**
 * What in a policy can never be used, each named by its field: a model the catalog does not have, an
 * embedding model where Olympus chooses (it chooses chat and completion models), an embedding_model
 * that is not one. Without a catalog (no Elastic), only embedding_model is refused (it must be one).
 */
function policyProblems(
  p: z.infer<typeof policyBody>,
  catalog: Pick<ElasticCatalog, 'get'> | undefined,
): { field: string; problem: string }[] {
  const problems: { field: string; problem: string }[] = [];
  const chosen = (name: string, field: string) => {
    if (!catalog) return;
    const model = catalog.get(name);
    if (!model) problems.push({ field, problem: `no catalog model "${name}" (GET /api/models lists them)` });
    else if (model.kind === 'embedding')
      problems.push({
        field,
        problem: `"${name}" is an embedding model; Olympus chooses among chat and completion models`,
      });
  };
  p.allowed_models.forEach((m, i) => chosen(m, `allowed_models.${i}`));
  p.routes.forEach((r, i) => {
    // A route's model outside allowed_models is refused by the schema already; named once.
    if (!p.allowed_models.length || !p.allowed_models.includes(r.model)) chosen(r.model, `routes.${i}.model`);
  });
  if (p.embedding_model !== null && catalog?.get(p.embedding_model)?.kind !== 'embedding')
    problems.push({ field: 'embedding_model', problem: 'must be an embedding model of the catalog' });
  return problems;
}

export function registerOlympusRoutes(
  routes: Routes,
  deps: { olympus: OlympusRepository; choose?: Omit<OlympusDeps, 'policies'> },
): void {
  const errors = {
    401: { description: 'Missing, malformed or revoked key', schema: openaiError },
    403: { description: 'Wrong scope', schema: openaiError },
  };
  routes.add(
    {
      method: 'get',
      path: '/api/olympus/policy',
      tag: 'olympus',
      auth: { scopes: ['inference', 'global'] },
      summary: 'The account’s Olympus routing policy (defaults when never set)',
      responses: { 200: { description: 'The policy', schema: policyView }, ...errors },
    },
    async ({ caller, res }) => {
      res.json(view(await deps.olympus.get(caller.accountId)));
    },
  );
  routes.add(
    {
      method: 'put',
      path: '/api/olympus/policy',
      tag: 'olympus',
      auth: { scopes: ['global'] },
      summary: 'Replace the account’s Olympus routing policy',
      body: policyBody,
      responses: {
        200: { description: 'The stored policy', schema: policyView },
        400: {
          description: 'Invalid body (the field is named in `param` and the message)',
          schema: openaiError,
        },
        ...errors,
      },
    },
    async ({ caller, body, res }) => {
      const b = body();
      const problems = policyProblems(b, deps.choose?.catalog);
      if (problems.length)
        throw new ApiError('validation_error', {
          message: `Invalid request body: ${problems.map((p) => `${p.field}: ${p.problem}`).join('; ')}`,
          param: problems[0]!.field,
        });
      const stored = await deps.olympus.put(caller.accountId, {
        allowedModels: b.allowed_models,
        objective: b.objective,
        routes: b.routes,
        routeThreshold: b.route_threshold,
        embeddingModel: b.embedding_model,
      });
      // Embed the examples now, so the first requests find them ready (in the background).
      deps.choose?.routes?.warm(caller.accountId, stored);
      res.json(view(stored));
    },
  );
  const choose = deps.choose;
  if (!choose) return;
  routes.add(
    {
      method: 'post',
      path: '/api/olympus/route',
      tag: 'olympus',
      auth: { scopes: ['inference', 'global'] },
      summary: 'Dry run: which catalog model Olympus would choose for this request now, and why',
      body: routeBody,
      responses: {
        200: { description: 'The choice (nothing is called or charged)', schema: routeView },
        400: {
          description: '`olympus_not_enabled`, an invalid body (the field is named), or no model fits',
          schema: openaiError,
        },
        ...errors,
        429: { description: 'Every model that fits is cooling down after a 429', schema: openaiError },
      },
    },
    async ({ caller, body, res }) => {
      const { endpoint, ...request } = body();
      const choice = await chooseModel(
        { ...choose, policies: deps.olympus },
        { accountId: caller.accountId, toolPin: caller.principal.toolPin },
        {
          kinds: ROUTE_KINDS[endpoint]!,
          body: request,
          requestBytes: JSON.stringify(request).length,
          tools: Array.isArray(request.tools) && request.tools.length > 0,
          requestId: String(res.locals.requestId),
          signal: caller.signal,
        },
      );
      res.setHeader(OLYMPUS_HEADER, choice.reason);
      const r = choice.routing;
      res.json({
        model: choice.model.name,
        reason: choice.reason,
        objective: choice.objective,
        considered: choice.considered,
        routing: r
          ? { outcome: r.outcome, embedding_model: r.embeddingModel ?? null, nearest: r.nearest ?? null }
          : null,
      });
    },
  );
}
