// The Elastic routes (spec §4): OpenAI-compatible calls to catalog models by display name, the
// model list, and the admin API of the catalog.
import { z } from 'zod';
import { isEndpointId, type DedicatedEndpoint } from '@berth/crds';
import { ApiError } from '../errors.ts';
import type { EndpointCache } from '../endpoints/ports.ts';
import type { Routes } from '../http/routes.ts';
import { jsonObjectBody } from '../http/validate.ts';
import { openaiError } from '../openapi.ts';
import { callScope } from '../proxy/scope.ts';
import type { ElasticCatalog } from '../elastic/catalog.ts';
import { type ElasticCaller, FALLBACK_HEADER, MODEL_HEADER } from '../elastic/call.ts';
import { adminModel, adminView, entryBody, modelName, type ModelKind } from '../elastic/entry.ts';
import { callDedicated, type DedicatedDeps } from './dedicated.ts';
import { chooseModel, chosenModel, type OlympusDeps } from '../olympus/choose.ts';
import { isOlympusModel, OLYMPUS_HEADER } from '../olympus/pick.ts';
import { answerManaged, managedTools, type ManagedToolDeps } from '../tools/elastic.ts';

export interface ElasticRouteDeps {
  catalog: ElasticCatalog;
  caller: ElasticCaller;
  requestTimeoutMs: number;
  /** `model` naming an `endpt-…`: the caller's own dedicated endpoint, through the same route. */
  dedicated?: Pick<DedicatedDeps, 'upstream' | 'usage' | 'dispatcher' | 'config' | 'metrics'> & {
    endpoints: EndpointCache;
  };
  /** `model` = auto | olympus | olympus-auto (absent: refused as olympus_not_enabled). */
  olympus?: Omit<OlympusDeps, 'catalog' | 'live'>;
  /** Managed tools (`{"type": "mcp", "server_label": …}` in `tools`); absent: such requests are refused. */
  managed?: ManagedToolDeps;
}

const ROUTES: readonly {
  path: string;
  upstreamPath: string;
  kinds: readonly ModelKind[];
  summary: string;
  pinned?: true;
}[] = [
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

const KIND_NAME: Record<ModelKind, string> = {
  chat: 'a chat model',
  completion: 'a completion model',
  embedding: 'an embedding model',
};

const modelObject = z.object({
  id: z.string(),
  object: z.literal('model'),
  created: z.number().int(),
  owned_by: z.string(),
});
const modelList = z.object({ object: z.literal('list'), data: z.array(modelObject) });

function notFound(name: string): ApiError {
  return new ApiError('model_not_found', { message: `The model \`${name}\` does not exist`, param: 'model' });
}

export function registerElasticRoutes(routes: Routes, deps: ElasticRouteDeps): void {
  const auth = { scopes: ['inference', 'global'], session: 'inference' } as const;
  for (const r of ROUTES) {
    routes.add(
      {
        method: 'post',
        path: r.path,
        tag: 'inference',
        auth,
        summary: r.summary,
        description: `\`model\` is a catalog display name (GET /api/models), or the id of one of the caller's own dedicated endpoints. Paid from the prepaid balance (free queries for accounts never credited). On 429, 5xx or an unreachable backend before the first byte, the call goes to the model's next backend, then to its fallback models; \`${MODEL_HEADER}\` names the model that answered and \`${FALLBACK_HEADER}\` the one it fell back from. \`model\` = \`auto\`, \`olympus\` or \`olympus-auto\`: Olympus chooses the catalog model (400 \`olympus_not_enabled\` unless enabled for the account and allowed by the key's tool pin); the answer's \`model\` names it and \`${OLYMPUS_HEADER}\` says why. On chat completions and responses, \`tools\` entries \`{"type": "mcp", "server_label": "<tool_id>"}\` run managed tools server-side (each call charged at the tool's price; 403 naming a tool not enabled or outside the key's pin).`,
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
        const pinned = r.pinned ? caller.principal.pinnedModel : null;
        const name = pinned ?? payload.model;
        if (typeof name !== 'string' || !name)
          throw new ApiError('validation_error', {
            message: 'Invalid request body: model: must be a string',
            param: 'model',
          });
        if (isEndpointId(name)) {
          const d = deps.dedicated;
          const endpoint: DedicatedEndpoint | undefined = d?.endpoints.get(name);
          if (!d || !endpoint) throw notFound(name);
          if (endpoint.spec.account !== caller.accountId) throw new ApiError('endpoint_not_owned');
          if (r.upstreamPath !== '/chat/completions' && r.upstreamPath !== '/completions')
            throw new ApiError('validation_error', {
              message: `Dedicated endpoints serve chat and text completions, not ${r.path}`,
              param: 'model',
            });
          return callDedicated(d, endpoint, {
            req,
            res,
            caller,
            method: 'post',
            upstreamPath: r.upstreamPath,
            payload: pinned ? { ...payload, model: name } : payload,
          });
        }
        const requestBytes = Number(req.get('content-length')) || JSON.stringify(payload).length;
        let olympus = false;
        let model = deps.catalog.get(name);
        if (isOlympusModel(name)) {
          if (!deps.olympus) throw new ApiError('olympus_not_enabled', { param: 'model' });
          const choice = await chooseModel(
            { ...deps.olympus, catalog: deps.catalog, live: deps.caller },
            { accountId: caller.accountId, toolPin: caller.principal.toolPin },
            {
              kinds: r.kinds,
              body: payload,
              requestBytes,
              tools: Array.isArray(payload.tools) && payload.tools.length > 0,
              requestId: String(res.locals.requestId),
              signal: caller.signal,
            },
          );
          model = chosenModel(choice);
          olympus = true;
          res.setHeader(OLYMPUS_HEADER, choice.reason);
        }
        if (!model) throw notFound(name);
        if (!r.kinds.includes(model.kind))
          throw new ApiError('validation_error', {
            message: `Model ${name} is ${KIND_NAME[model.kind]}; ${r.path} needs ${r.kinds.map((k) => KIND_NAME[k]).join(' or ')}`,
            param: 'model',
          });
        const asks =
          r.kinds.includes('chat') && r.path !== '/api/completions' ? managedTools(payload.tools) : undefined;
        const scope = callScope(res, caller.tracked ?? caller.signal, deps.requestTimeoutMs);
        try {
          if (asks) {
            if (!deps.managed)
              throw new ApiError('unknown_tool', {
                message: 'Managed tools are not configured on this API',
                param: 'tools',
              });
            return await answerManaged(
              { ...deps.managed, caller: deps.caller },
              {
                route: r.path === '/api/responses' ? 'responses' : 'chat',
                body: payload,
                asks,
                model,
                call: {
                  accountId: caller.accountId,
                  keyId: caller.principal.keyId,
                  requestId: String(res.locals.requestId),
                  signal: scope.signal,
                  ...(olympus ? { renameModel: true } : {}),
                },
                toolPin: caller.principal.toolPin,
              },
              res,
            );
          }
          await deps.caller.call(
            {
              model,
              kinds: r.kinds,
              path: r.upstreamPath,
              body: payload,
              requestBytes,
              accountId: caller.accountId,
              keyId: caller.principal.keyId,
              requestId: String(res.locals.requestId),
              signal: scope.signal,
              ...(olympus ? { renameModel: true } : {}),
            },
            res,
          );
        } finally {
          scope.end();
        }
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
        data: deps.catalog
          .list()
          .map((m) => ({ id: m.name, object: 'model', created: created(m.updatedAt), owned_by: 'berth' })),
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
      if (!m) throw notFound(params.name);
      res.json({ id: m.name, object: 'model', created: created(m.updatedAt), owned_by: 'berth' });
    },
  );
}

export function registerCatalogAdminRoutes(routes: Routes, deps: { catalog: ElasticCatalog }): void {
  const modelByName = (name: string) => {
    const m = deps.catalog.get(name);
    if (!m) throw new ApiError('not_found', { message: `Catalog model ${name} not found` });
    return m;
  };
  routes.add(
    {
      method: 'put',
      path: '/admin/models/{name}',
      tag: 'admin',
      auth: 'admin',
      summary: 'Create or replace an Elastic catalog model',
      body: entryBody,
      responses: {
        200: { description: 'Replaced', schema: adminModel },
        201: { description: 'Created', schema: adminModel },
        400: { description: 'Invalid entry; the message names the field' },
      },
    },
    async ({ res, params, body }) => {
      const checked = modelName.safeParse(params.name);
      if (!checked.success)
        throw new ApiError('validation_error', {
          message: `Invalid model name: ${checked.error.issues[0]!.message}`,
          param: 'name',
        });
      const name = checked.data;
      const created = await deps.catalog.put(name, body());
      res.status(created ? 201 : 200).json(adminView(modelByName(name)));
    },
  );
  routes.add(
    {
      method: 'get',
      path: '/admin/models',
      tag: 'admin',
      auth: 'admin',
      summary: 'The Elastic catalog (secrets shown as "set")',
      responses: { 200: { description: 'Every model', schema: z.object({ data: z.array(adminModel) }) } },
    },
    ({ res }) => {
      res.json({ data: deps.catalog.list().map(adminView) });
    },
  );
  routes.add(
    {
      method: 'get',
      path: '/admin/models/{name}',
      tag: 'admin',
      auth: 'admin',
      summary: 'One Elastic catalog model',
      responses: {
        200: { description: 'The model', schema: adminModel },
        404: { description: 'No such model' },
      },
    },
    ({ res, params }) => {
      res.json(adminView(modelByName(params.name)));
    },
  );
  routes.add(
    {
      method: 'delete',
      path: '/admin/models/{name}',
      tag: 'admin',
      auth: 'admin',
      summary: 'Remove an Elastic catalog model',
      responses: {
        204: { description: 'Removed' },
        404: { description: 'No such model' },
        409: { description: 'Another model falls back to it' },
      },
    },
    async ({ res, params }) => {
      if (!(await deps.catalog.delete(params.name)))
        throw new ApiError('not_found', { message: `Catalog model ${params.name} not found` });
      res.status(204).end();
    },
  );
}
