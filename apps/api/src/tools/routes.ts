// Managed tools: the operator's catalog (/admin/tools) and each account's enablement (/api/tools).
// Tool resources use snake_case fields, as the spec's `tool_id` does.
import { z } from 'zod';
import { formatAmount, parseAmount } from '../platform/money.ts';
import { ApiError } from '../platform/errors.ts';
import type { Routes } from '../http/routes.ts';
import { parse } from '../http/validate.ts';
import { simpleError } from '../http/openapi.ts';
import type { ToolRecord, ToolRepository } from './repository.ts';
import type { Sealer } from '../platform/sealed.ts';
import { toolId } from '../accounts/keys/views.ts';
import { globalKeyErrors, globalKey } from '../http/auth.ts';

const PRICE = 'must be a decimal string with at most 6 decimals, e.g. "0.002"';
const headerName = z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$/, 'must be an HTTP header name');

export const putToolBody = z.strictObject({
  description: z.string().trim().min(1, 'must not be empty').max(1000, 'must be at most 1000 characters'),
  url: z
    .string()
    .url('must be the MCP server’s streamable HTTP URL, e.g. https://mcp.example.com/mcp')
    .refine((u) => /^https?:\/\//.test(u), 'must be an http:// or https:// URL'),
  headers: z
    .record(headerName, z.string().max(8192, 'must be at most 8192 characters'))
    .refine((h) => Object.keys(h).length <= 32, 'must have at most 32 headers')
    .optional()
    .describe('Sent with every MCP request (credentials); stored sealed, never shown again'),
  price_per_call: z
    .string({ error: PRICE })
    .refine((v) => parseAmount(v) !== undefined, PRICE)
    .describe('Charged from the prepaid balance per tools/call, e.g. "0.002"'),
  timeout_ms: z
    .number({ error: 'must be a number of milliseconds' })
    .int('must be a whole number')
    .min(100, 'must be at least 100')
    .max(780_000, 'must be at most 780000 (the 13-minute wall clock)')
    .optional()
    .describe('Limit of one MCP request (default 30000)'),
});

const enableBody = z.strictObject({
  tool_id: z.string({ error: 'must be a string' }).min(1, 'must not be empty'),
});

export const toolView = z.object({
  tool_id: z.string(),
  kind: z.enum(['mcp', 'feature']).describe('`mcp`: a managed tool; `feature`: olympus or chronos'),
  description: z.string(),
  price_per_call: z.string().describe('Decimal string in the billing currency'),
  enabled: z.boolean().describe('Enabled for the caller’s account'),
  enabled_at: z.string().nullable(),
});
const adminToolView = z.object({
  tool_id: z.string(),
  kind: z.enum(['mcp', 'feature']),
  description: z.string(),
  url: z.string().nullable(),
  header_names: z.array(z.string()).describe('Header values are sealed and never shown'),
  price_per_call: z.string(),
  timeout_ms: z.number(),
  created_at: z.string(),
  updated_at: z.string(),
});

function view(t: ToolRecord, enabledAt: Date | undefined): z.infer<typeof toolView> {
  return {
    tool_id: t.id,
    kind: t.kind,
    description: t.description,
    price_per_call: formatAmount(t.pricePerCall),
    enabled: enabledAt !== undefined,
    enabled_at: enabledAt?.toISOString() ?? null,
  };
}

function adminView(t: ToolRecord): z.infer<typeof adminToolView> {
  return {
    tool_id: t.id,
    kind: t.kind,
    description: t.description,
    url: t.url,
    header_names: t.headerNames,
    price_per_call: formatAmount(t.pricePerCall),
    timeout_ms: t.timeoutMs,
    created_at: t.createdAt.toISOString(),
    updated_at: t.updatedAt.toISOString(),
  };
}

function pathToolId(id: string): string {
  return parse(z.object({ tool_id: toolId }), { tool_id: id }, 'path').tool_id;
}

const notFound = (id: string) => new ApiError('not_found', { message: `Tool "${id}" not found` });
const builtin = (id: string) =>
  new ApiError('builtin_tool', {
    message: `"${id}" is a built-in feature switch; it cannot be replaced or removed (accounts enable it with POST /api/tools)`,
  });

export interface ToolRouteDeps {
  tools: ToolRepository;
  /** Absent when BERTH_SECRETS_KEY is not configured: tools with headers are refused. */
  sealer?: Sealer;
}

export function registerToolAdminRoutes(routes: Routes, deps: ToolRouteDeps): void {
  const adminErrors = {
    401: { description: 'Bad admin token', schema: simpleError },
    404: { description: 'No such tool', schema: simpleError },
  };
  routes.add(
    {
      method: 'put',
      path: '/admin/tools/{tool_id}',
      tag: 'tools',
      auth: 'admin',
      summary: 'Register or replace a managed tool (an MCP server, streamable HTTP)',
      body: putToolBody,
      responses: {
        200: { description: 'Replaced', schema: adminToolView },
        201: { description: 'Registered', schema: adminToolView },
        400: { description: 'Invalid id or body (the field is named)', schema: simpleError },
        409: { description: '`olympus` and `chronos` are built in', schema: simpleError },
        503: { description: 'Headers given and BERTH_SECRETS_KEY is not set', schema: simpleError },
      },
    },
    async ({ params, body, res }) => {
      const id = pathToolId(params.tool_id);
      const b = body();
      const headers = b.headers ?? {};
      const names = Object.keys(headers);
      if (names.length && !deps.sealer) throw new ApiError('secrets_unavailable');
      const result = await deps.tools.upsertMcp(id, {
        description: b.description,
        url: b.url,
        headersSealed: names.length ? deps.sealer!.seal(JSON.stringify(headers), `tool:${id}`) : null,
        headerNames: names,
        pricePerCall: parseAmount(b.price_per_call)!,
        timeoutMs: b.timeout_ms ?? 30_000,
      });
      if ('feature' in result) throw builtin(id);
      res.status(result.created ? 201 : 200).json(adminView(result.tool));
    },
  );
  routes.add(
    {
      method: 'get',
      path: '/admin/tools',
      tag: 'tools',
      auth: 'admin',
      summary: 'The tool catalog, with MCP URLs and header names',
      responses: { 200: { description: 'Tools by id', schema: z.object({ data: z.array(adminToolView) }) } },
    },
    async ({ res }) => {
      res.json({ data: (await deps.tools.list()).map(adminView) });
    },
  );
  routes.add(
    {
      method: 'get',
      path: '/admin/tools/{tool_id}',
      tag: 'tools',
      auth: 'admin',
      summary: 'One tool',
      responses: { 200: { description: 'The tool', schema: adminToolView }, ...adminErrors },
    },
    async ({ params, res }) => {
      const tool = await deps.tools.get(params.tool_id);
      if (!tool) throw notFound(params.tool_id);
      res.json(adminView(tool));
    },
  );
  routes.add(
    {
      method: 'delete',
      path: '/admin/tools/{tool_id}',
      tag: 'tools',
      auth: 'admin',
      summary: 'Remove a managed tool (every account’s enablement with it)',
      responses: {
        200: { description: 'The removed tool', schema: adminToolView },
        409: { description: '`olympus` and `chronos` are built in', schema: simpleError },
        ...adminErrors,
      },
    },
    async ({ params, res }) => {
      const removed = await deps.tools.deleteMcp(params.tool_id);
      if (removed) return void res.json(adminView(removed));
      if ((await deps.tools.get(params.tool_id))?.kind === 'feature') throw builtin(params.tool_id);
      throw notFound(params.tool_id);
    },
  );
}

export function registerToolRoutes(routes: Routes, deps: ToolRouteDeps): void {
  routes.add(
    {
      method: 'get',
      path: '/api/tools',
      tag: 'tools',
      auth: { scopes: ['inference', 'global'], session: 'manage' },
      summary: 'The tool catalog, with `enabled` for the caller’s account',
      responses: {
        200: { description: 'Tools by id', schema: z.object({ data: z.array(toolView) }) },
        401: globalKeyErrors[401],
        403: { description: 'A compute key', schema: simpleError },
      },
    },
    async ({ caller, res }) => {
      const [tools, enabled] = await Promise.all([deps.tools.list(), deps.tools.enabled(caller.accountId)]);
      res.json({ data: tools.map((t) => view(t, enabled.get(t.id))) });
    },
  );
  routes.add(
    {
      method: 'post',
      path: '/api/tools',
      tag: 'tools',
      auth: globalKey,
      summary: 'Enable a tool (or `olympus`, `chronos`) for the account; idempotent',
      body: enableBody,
      responses: {
        200: { description: 'Enabled (already enabled keeps its first time)', schema: toolView },
        400: { description: 'Invalid body', schema: simpleError },
        404: { description: 'No such tool', schema: simpleError },
        ...globalKeyErrors,
      },
    },
    async ({ caller, body, res }) => {
      const { tool_id } = body();
      const tool = await deps.tools.get(tool_id);
      const at = tool && (await deps.tools.enable(caller.accountId, tool_id));
      if (!tool || !at) throw notFound(tool_id);
      res.json(view(tool, at));
    },
  );
  routes.add(
    {
      method: 'delete',
      path: '/api/tools/{tool_id}',
      tag: 'tools',
      auth: globalKey,
      summary: 'Disable a tool for the account; idempotent',
      responses: {
        200: { description: 'Disabled', schema: toolView },
        404: { description: 'No such tool', schema: simpleError },
        ...globalKeyErrors,
      },
    },
    async ({ caller, params, res }) => {
      const tool = await deps.tools.get(params.tool_id);
      if (!tool) throw notFound(params.tool_id);
      await deps.tools.disable(caller.accountId, tool.id);
      res.json(view(tool, undefined));
    },
  );
}
