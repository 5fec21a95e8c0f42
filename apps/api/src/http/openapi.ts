// The OpenAPI document is generated from the same zod schemas that validate requests and shape
// responses: each route declares its operation once (http/routes.ts), which adds it here.
import { z } from 'zod';
import { familyOf } from '../platform/errors.ts';

export type Auth = 'admin' | 'key' | 'none';

export interface Operation {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  /** OpenAPI path template, e.g. `/api/keys/{id}`. */
  path: string;
  summary: string;
  description?: string;
  /** Stable name for generated clients; derived from method and path unless given. */
  operationId?: string;
  tag: string;
  auth: Auth;
  scopes?: readonly string[];
  /** A dashboard session may call it too (no Bearer header; X-CSRF-Token on state changes). */
  session?: boolean;
  body?: z.ZodType;
  /** The query's parameters (documented only: the handler parses them, so it decides when). */
  query?: z.ZodObject;
  responses: Record<number, { description: string; schema?: z.ZodType; contentType?: string }>;
}

export class ApiDoc {
  private readonly operations: Operation[] = [];

  add(op: Operation): void {
    this.operations.push(op);
  }

  document(version: string): Record<string, unknown> {
    const paths: Record<string, Record<string, unknown>> = {};
    for (const op of this.operations) {
      const params = [...op.path.matchAll(/\{(\w+)\}/g)].map((m) => ({
        name: m[1],
        in: 'path',
        required: true,
        schema: { type: 'string' },
      }));
      const scopes = op.scopes?.length ? `\n\nKey scopes allowed: ${op.scopes.join(', ')}.` : '';
      (paths[op.path] ??= {})[op.method] = {
        operationId: op.operationId ?? operationIdOf(op.method, op.path),
        summary: op.summary,
        description: (op.description ?? '') + scopes || undefined,
        tags: [op.tag],
        // The key scopes an operation takes are the apiKey requirement's role names (OpenAPI 3.1
        // allows them for any scheme): clients and the security suite read who may call from here.
        security:
          op.auth === 'none'
            ? []
            : op.auth === 'admin'
              ? [{ adminToken: [] }]
              : [{ apiKey: [...(op.scopes ?? [])] }, ...(op.session ? [{ dashboardSession: [] }] : [])],
        parameters: params.length || op.query ? [...params, ...queryParameters(op.query)] : undefined,
        requestBody: op.body
          ? {
              required: !op.body.isOptional(),
              content: { 'application/json': { schema: jsonSchema(op.body, 'input') } },
            }
          : undefined,
        responses: Object.fromEntries(
          Object.entries({ ...refusals(op), ...op.responses }).map(([status, r]) => [
            status,
            {
              description: r.description,
              content: r.schema
                ? { [r.contentType ?? 'application/json']: { schema: jsonSchema(r.schema, 'output') } }
                : undefined,
            },
          ]),
        ),
      };
    }
    return {
      openapi: '3.1.0',
      info: {
        title: 'Berth API',
        version,
        license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
        description:
          'Control plane for dedicated GPU inference endpoints. Errors on OpenAI-style routes have the shape ' +
          '`{"error": {"message", "type", "code", "param"}, "message"}`; on other routes `{"error": "<message>", "code"}`.',
      },
      // Relative: the API that serves this document (and /docs) is the one it describes.
      servers: [{ url: '/', description: 'This Berth API' }],
      components: {
        securitySchemes: {
          apiKey: { type: 'http', scheme: 'bearer', description: 'An API key: `svc_live_` + 33 characters' },
          adminToken: { type: 'http', scheme: 'bearer', description: 'The operator-provided ADMIN_TOKEN' },
          dashboardSession: {
            type: 'apiKey',
            in: 'cookie',
            name: 'berth_session',
            description:
              'The dashboard’s session (sign in at /auth/login). Calls that change state also send the X-CSRF-Token header with the csrfToken of GET /auth/session.',
          },
        },
      },
      paths,
    };
  }
}

/** All the key scopes: an operation that takes fewer refuses the others with 403. */
const ALL_SCOPES = ['inference', 'compute', 'global'];

/**
 * The refusals authentication itself gives, documented on every operation it guards unless the
 * route describes them in its own words: 401 without a valid credential, 403 for a key of a scope
 * the operation does not take or a session write without its CSRF token.
 */
function refusals(op: Operation): Operation['responses'] {
  if (op.auth === 'none') return {};
  const schema = familyOf(op.path) === 'openai' ? openaiError : simpleError;
  if (op.auth === 'admin')
    return { 401: { description: 'Missing or invalid admin token (ADMIN_TOKEN)', schema } };
  const out: Operation['responses'] = {
    401: {
      description:
        'No credential (`Missing or invalid Authorization header`), or a malformed, revoked or unknown key (`Invalid API key`)',
      schema,
    },
  };
  const narrower = !!op.scopes && ALL_SCOPES.some((s) => !op.scopes!.includes(s));
  if (narrower || op.session)
    out[403] = {
      description: [
        narrower ? `A key of another scope (this operation takes ${op.scopes!.join(', ')})` : '',
        op.session ? 'a session call that changes state without its X-CSRF-Token' : '',
      ]
        .filter(Boolean)
        .join('; or '),
      schema,
    };
  return out;
}

function queryParameters(query: z.ZodObject | undefined): Record<string, unknown>[] {
  if (!query) return [];
  return Object.entries(query.shape).map(([name, field]) => {
    const { description, ...schema } = jsonSchema(field as z.ZodType, 'input') as { description?: string };
    return {
      name,
      in: 'query',
      required: !(field as z.ZodType).isOptional(),
      ...(description ? { description } : {}),
      schema,
    };
  });
}

/**
 * `get /api/endpoints/{id}/logs` → `getEndpointsByIdLogs`: the verb, then the path's words without
 * `/api`, each parameter as `By<Name>` — unique per operation, and stable while the route is.
 */
export function operationIdOf(method: string, path: string): string {
  const cap = (w: string) => w.charAt(0).toUpperCase() + w.slice(1);
  const words = path
    .replace(/^\/api(?=\/|$)/, '')
    .split('/')
    .filter(Boolean)
    .map((seg) => {
      const param = /^\{(\w+)\}$/.exec(seg);
      return param
        ? `By${cap(param[1]!)}`
        : seg
            .split(/[^A-Za-z0-9]+/)
            .filter(Boolean)
            .map(cap)
            .join('');
    });
  return method + words.join('');
}

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): unknown {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<
    string,
    unknown
  >;
  return rest;
}

export const simpleError = z
  .object({ error: z.string(), code: z.string().optional() })
  .describe('Error on a non-OpenAI route');
export const openaiError = z
  .object({
    error: z.object({
      message: z.string(),
      type: z.string(),
      code: z.string().nullable(),
      param: z.string().nullable(),
    }),
    message: z.string(),
  })
  .describe('Error on an OpenAI-style route');
