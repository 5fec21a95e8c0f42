// The front door's OpenAI-compatible routes (spec §4): chat and text completions, embeddings and
// responses, to a catalog model by display name, to a model Olympus chooses, or to one of the
// caller's own dedicated endpoints (`model` = `endpt-…`), with managed tools on chat routes; and the
// model list. Each call is decided by ./decide.ts and answered by ./answer.ts. `/api/d/{id}/…` is
// ./dedicated-routes.ts.
import { z } from 'zod';
import type { Routes } from '../http/routes.ts';
import { jsonObjectBody } from '../http/validate.ts';
import { openaiError } from '../http/openapi.ts';
import { HOLD_HEADER } from '../dedicated/call.ts';
import type { ElasticCatalog } from '../elastic/catalog.ts';
import { FALLBACK_HEADER, MODEL_HEADER } from '../elastic/call.ts';
import type { OlympusDeps } from '../olympus/choose.ts';
import { OLYMPUS_HEADER } from '../olympus/choose.ts';
import type { EndpointCache } from '../dedicated/ports.ts';
import type { TraceSpan } from '../platform/tracing.ts';
import { answerCall, type AnswerDeps } from './answer.ts';
import { decideCall, modelNotFound, type DecideDeps, type InferenceRoute } from './decide.ts';

export interface InferenceDeps extends AnswerDeps {
  catalog: ElasticCatalog;
  /** `model` naming an `endpt-…`: the caller's own dedicated endpoint, through the same route. */
  dedicated?: AnswerDeps['dedicated'] & { endpoints: EndpointCache };
  /** `model` = auto | olympus | olympus-auto (absent: refused as olympus_not_enabled). */
  olympus?: Omit<OlympusDeps, 'catalog' | 'live'>;
}

const ROUTES: readonly (InferenceRoute & { summary: string; pinned?: true })[] = [
  {
    path: '/api/chat/completions',
    upstreamPath: '/chat/completions',
    kinds: ['chat'],
    summary: 'Elastic chat completion (streaming with `stream: true`)',
  },
  {
    path: '/api/b/chat/completions',
    upstreamPath: '/chat/completions',
    kinds: ['chat'],
    summary: "Elastic chat completion; a key's pinned model overrides `model`",
    pinned: true,
  },
  {
    path: '/api/completions',
    upstreamPath: '/completions',
    kinds: ['completion', 'chat'],
    summary: 'Elastic text completion',
  },
  {
    path: '/api/embeddings',
    upstreamPath: '/embeddings',
    kinds: ['embedding'],
    summary: 'Elastic embeddings',
  },
  {
    path: '/api/responses',
    upstreamPath: '/responses',
    kinds: ['chat'],
    summary: 'Elastic Responses API (as vLLM serves it)',
  },
];

const modelObject = z.object({
  id: z.string(),
  object: z.literal('model'),
  created: z.number().int(),
  owned_by: z.string(),
  kind: z
    .enum(['chat', 'completion', 'embedding'])
    .describe('Berth: which routes take the model (chat and responses, completions, or embeddings)'),
});
const modelList = z.object({ object: z.literal('list'), data: z.array(modelObject) });

export function registerInferenceRoutes(routes: Routes, deps: InferenceDeps): void {
  const auth = { scopes: ['inference', 'global'], session: 'inference' } as const;
  const decide: DecideDeps = {
    catalog: deps.catalog,
    live: deps.caller,
    ...(deps.dedicated ? { endpoints: deps.dedicated.endpoints } : {}),
    ...(deps.olympus ? { olympus: deps.olympus } : {}),
    managed: !!deps.managed,
  };
  for (const r of ROUTES) {
    routes.add(
      {
        method: 'post',
        path: r.path,
        tag: 'inference',
        auth,
        traced: true,
        // Ahead of Express (http/fast-entry.ts): the front door's calls skip its dispatch.
        fast: true,
        summary: r.summary,
        description: `\`model\` is a catalog display name (GET /api/models), or the id of one of the caller's own dedicated endpoints. Paid from the prepaid balance (free queries for accounts never credited). On 429, 5xx or an unreachable backend before the first byte, the call goes to the model's next backend, then to its fallback models; \`${MODEL_HEADER}\` names the model that answered (so does the answer's \`model\`, on every path) and \`${FALLBACK_HEADER}\` the one it fell back from. \`model\` = \`auto\`, \`olympus\` or \`olympus-auto\`: Olympus chooses the catalog model (400 \`olympus_not_enabled\` unless enabled for the account and allowed by the key's tool pin); the answer's \`model\` names it and \`${OLYMPUS_HEADER}\` says why. On chat completions and responses, \`tools\` entries \`{"type": "mcp", "server_label": "<tool_id>"}\` run managed tools server-side (each call charged at the tool's price; 403 naming a tool not enabled or outside the key's pin).`,
        body: jsonObjectBody,
        responses: {
          200: { description: 'The answer, streamed as it is produced with `stream: true`' },
          400: {
            description: 'Invalid body, a model of another kind, or `olympus_not_enabled`',
            schema: openaiError,
          },
          504: {
            description: 'The wall-clock limit (REQUEST_TIMEOUT_MS) ended the call',
            schema: openaiError,
          },
          401: { description: 'Missing, malformed or revoked key', schema: openaiError },
          402: { description: 'Insufficient balance / payment required', schema: openaiError },
          403: {
            description: 'A compute key, another account’s endpoint, or a managed tool not allowed (named)',
            schema: openaiError,
          },
          404: { description: 'No such model (`model_not_found`)', schema: openaiError },
          429: { description: 'Every backend and fallback at capacity', schema: openaiError },
          503: { description: 'No backend available', schema: openaiError },
        },
      },
      async ({ req, res, caller, body }) => {
        const payload = body() as Record<string, unknown>;
        const requestId = String(res.locals.requestId);
        const requestBytes = Number(req.get('content-length')) || JSON.stringify(payload).length;
        const trace = res.locals.trace as TraceSpan | undefined;
        const plan = await decideCall(decide, {
          route: r,
          name: (r.pinned ? caller.principal.pinnedModel : null) ?? payload.model,
          body: payload,
          requestBytes,
          caller: { accountId: caller.accountId, toolPin: caller.principal.toolPin },
          requestId,
          signal: caller.signal,
          onChoice: (choice) => res.setHeader(OLYMPUS_HEADER, choice.reason),
          ...(trace ? { trace: trace.context } : {}),
        });
        trace?.set(
          plan.kind === 'dedicated'
            ? { 'berth.endpoint.id': plan.endpoint.metadata.name }
            : { 'berth.catalog_model': plan.model.name, 'gen_ai.request.model': plan.model.name },
        );
        return answerCall(deps, plan, {
          res,
          caller,
          route: r,
          body: payload,
          requestBytes,
          requestId,
          noHold: req.get(HOLD_HEADER)?.toLowerCase() === 'false',
          ...(trace ? { trace: trace.context } : {}),
        });
      },
    );
  }

  const created = (d: Date) => Math.floor(d.getTime() / 1000);
  routes.add(
    {
      method: 'get',
      path: '/api/models',
      tag: 'inference',
      auth,
      summary: 'List the catalog models (OpenAI-compatible)',
      responses: {
        200: { description: 'Models', schema: modelList },
        401: { description: 'Missing, malformed or revoked key', schema: openaiError },
        403: { description: 'A compute key', schema: openaiError },
      },
    },
    ({ res }) => {
      res.json({
        object: 'list',
        data: deps.catalog.list().map((m) => ({
          id: m.name,
          object: 'model',
          created: created(m.updatedAt),
          owned_by: 'berth',
          kind: m.kind,
        })),
      });
    },
  );
  routes.add(
    {
      method: 'get',
      path: '/api/models/{name}',
      tag: 'inference',
      auth,
      summary: 'One catalog model (OpenAI-compatible)',
      responses: {
        200: { description: 'The model', schema: modelObject },
        404: { description: 'No such model', schema: openaiError },
      },
    },
    ({ res, params }) => {
      const m = deps.catalog.get(params.name);
      if (!m) throw modelNotFound(params.name);
      res.json({
        id: m.name,
        object: 'model',
        created: created(m.updatedAt),
        owned_by: 'berth',
        kind: m.kind,
      });
    },
  );
}
