// The OpenAPI document is generated from the same zod schemas that validate requests and shape
// responses: each route declares its operation once (http/routes.ts), which adds it here.
import { z } from 'zod';

export type Auth = 'admin' | 'key' | 'none';

export interface Operation {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  /** OpenAPI path template, e.g. `/api/keys/{id}`. */
  path: string;
  summary: string;
  description?: string;
  tag: string;
  auth: Auth;
  scopes?: readonly string[];
  /** A dashboard session may call it too (no Bearer header; X-CSRF-Token on state changes). */
  session?: boolean;
  body?: z.ZodType;
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
        summary: op.summary,
        description: (op.description ?? '') + scopes || undefined,
        tags: [op.tag],
        security:
          op.auth === 'none'
            ? []
            : [
                { [op.auth === 'admin' ? 'adminToken' : 'apiKey']: [] },
                ...(op.session ? [{ dashboardSession: [] }] : []),
              ],
        parameters: params.length ? params : undefined,
        requestBody: op.body
          ? {
              required: !op.body.isOptional(),
              content: { 'application/json': { schema: jsonSchema(op.body, 'input') } },
            }
          : undefined,
        responses: Object.fromEntries(
          Object.entries(op.responses).map(([status, r]) => [
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
        description:
          'Control plane for dedicated GPU inference endpoints. Errors on OpenAI-style routes have the shape ' +
          '`{"error": {"message", "type", "code", "param"}, "message"}`; on other routes `{"error": "<message>", "code"}`.',
      },
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
