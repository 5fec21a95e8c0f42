// Typed calls to the API, same origin, with the session cookie. Every type below is the API's own
// answer or request body, taken from its generated OpenAPI types (apps/api/generated/openapi.d.ts,
// `npm run openapi -w @berth/api`): a change of a route's schema breaks `npm run typecheck` here.
import type { paths } from '../../api/generated/openapi.d.ts';

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';
type JsonOf<R> = R extends { content: { 'application/json': infer T } } ? T : never;
/** The JSON body of a route's success answer (200, else 201). */
type Answer<P extends keyof paths, M extends Method> = paths[P][M] extends { responses: infer R }
  ? JsonOf<200 extends keyof R ? R[200] : 201 extends keyof R ? R[201] : never>
  : never;
/** The JSON body a route takes. */
type Body<P extends keyof paths, M extends Method> = paths[P][M] extends { requestBody?: infer B }
  ? JsonOf<NonNullable<B>>
  : never;

export type SessionInfo = Answer<'/auth/session', 'get'>;
export type ApiKey = Answer<'/api/keys', 'get'>['data'][number];
export type CreatedKey = Answer<'/api/keys', 'post'>;
export type RotatedKey = Answer<'/api/keys/{id}/rotate', 'post'>;
export type KeyChange = Body<'/api/keys/{id}', 'patch'>;
export type Scope = ApiKey['scope'];
export type Endpoint = Answer<'/api/endpoints/{id}', 'get'>;
export type Status = Endpoint['status'];
export type Label = Endpoint['label'];
export type Hardware = Answer<'/api/hardware', 'get'>['data'][number];
export type Balance = Answer<'/api/billing/balance', 'get'>;
export type LedgerEntry = Answer<'/api/billing/ledger', 'get'>['data'][number];
export type UsageRow = Answer<'/api/billing/usage', 'get'>['data'][number];
export type Invoices = Answer<'/api/billing/invoices', 'get'>;
export type InvoiceSummary = Invoices['data'][number];
export type Upcoming = Invoices['upcoming'];
export type Tool = Answer<'/api/tools', 'get'>['data'][number];

/** An error answer of the API, with its message as the user should read it. */
export class ApiFailure extends Error {
  readonly status: number;
  readonly code?: string;
  constructor(status: number, message: string, code?: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let csrfToken = '';
export function setCsrfToken(token: string | undefined): void {
  csrfToken = token ?? '';
}

/** Reads an error body in either of the API's two shapes (spec §7). */
export async function failure(res: Response): Promise<ApiFailure> {
  const text = await res.text();
  try {
    const body = JSON.parse(text) as { error?: string | { message: string; code?: string }; code?: string };
    if (typeof body.error === 'string') return new ApiFailure(res.status, body.error, body.code);
    if (body.error) return new ApiFailure(res.status, body.error.message, body.error.code);
  } catch {
    // not JSON
  }
  return new ApiFailure(res.status, text || `HTTP ${res.status}`);
}

/** A call with the session; state-changing methods carry the CSRF token. */
export async function call(path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  if (init.body !== undefined) headers.set('content-type', 'application/json');
  if (init.method && init.method !== 'GET') headers.set('x-csrf-token', csrfToken);
  // Live data: never from the browser's HTTP cache.
  const res = await fetch(path, { cache: 'no-store', ...init, headers, credentials: 'same-origin' });
  if (!res.ok) throw await failure(res);
  return res;
}

const json = async <T>(path: string, init?: RequestInit): Promise<T> =>
  (await call(path, init)).json() as Promise<T>;
const send = (method: string, body?: unknown): RequestInit => ({
  method,
  ...(body === undefined ? {} : { body: JSON.stringify(body) }),
});

/**
 * Every item of a paged list route, as `{data}`: page after page (`after` = the previous page's
 * `last_id`) until `has_more` is false.
 */
async function everyPage<T>(path: string): Promise<{ data: T[] }> {
  const data: T[] = [];
  let after: string | null = null;
  do {
    const page: { data: T[]; has_more?: boolean; last_id?: string | null } = await json(
      after ? `${path}?after=${encodeURIComponent(after)}` : path,
    );
    data.push(...page.data);
    after = page.has_more ? (page.last_id ?? null) : null;
  } while (after);
  return { data };
}

export const api = {
  session: () => json<SessionInfo>('/auth/session'),
  logout: () => call('/auth/logout', send('POST')),
  keys: () => everyPage<ApiKey>('/api/keys'),
  createKey: (body: Body<'/api/keys', 'post'>) => json<CreatedKey>('/api/keys', send('POST', body)),
  updateKey: (id: string, body: KeyChange) =>
    json<ApiKey>(`/api/keys/${encodeURIComponent(id)}`, send('PATCH', body)),
  rotateKey: (id: string, body: Body<'/api/keys/{id}/rotate', 'post'>) =>
    json<RotatedKey>(`/api/keys/${encodeURIComponent(id)}/rotate`, send('POST', body)),
  revokeKey: (id: string) =>
    json<Answer<'/api/keys/{id}', 'delete'>>(`/api/keys/${encodeURIComponent(id)}`, send('DELETE')),
  endpoints: () => everyPage<Endpoint>('/api/endpoints'),
  endpoint: (id: string) => json<Endpoint>(`/api/endpoints/${encodeURIComponent(id)}`),
  createEndpoint: (body: Body<'/api/endpoints', 'post'>) =>
    json<Answer<'/api/endpoints', 'post'>>('/api/endpoints', send('POST', body)),
  wake: (id: string) => call(`/api/endpoints/${encodeURIComponent(id)}/wake`, send('POST')),
  terminate: (id: string) => call(`/api/endpoints/${encodeURIComponent(id)}`, send('DELETE')),
  logs: (id: string, signal: AbortSignal) =>
    call(`/api/endpoints/${encodeURIComponent(id)}/logs?follow=true`, { signal }),
  hardware: () => json<Answer<'/api/hardware', 'get'>>('/api/hardware'),
  models: () => json<Answer<'/api/models', 'get'>>('/api/models'),
  balance: () => json<Balance>('/api/billing/balance'),
  ledger: () => json<Answer<'/api/billing/ledger', 'get'>>('/api/billing/ledger?limit=20'),
  usage: () => json<Answer<'/api/billing/usage', 'get'>>('/api/billing/usage'),
  invoices: () => json<Invoices>('/api/billing/invoices'),
  tools: () => json<Answer<'/api/tools', 'get'>>('/api/tools'),
  enableTool: (toolId: Body<'/api/tools', 'post'>['tool_id']) =>
    call('/api/tools', send('POST', { tool_id: toolId })),
  disableTool: (toolId: string) => call(`/api/tools/${encodeURIComponent(toolId)}`, send('DELETE')),
  /** A streamed chat completion (SSE): calls `onToken` for every piece of content. */
  async chat(
    target: { endpointId?: string; model: string },
    messages: { role: string; content: string }[],
    onToken: (text: string) => void,
    signal: AbortSignal,
  ): Promise<void> {
    const path = target.endpointId
      ? `/api/d/${encodeURIComponent(target.endpointId)}/chat/completions`
      : '/api/chat/completions';
    const res = await call(path, {
      ...send('POST', { model: target.model, messages, stream: true, max_tokens: 256 }),
      signal,
    });
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let cut: number;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split('\n')) {
          if (!line.startsWith('data:')) continue;
          const data = line.slice(5).trim();
          if (data === '[DONE]') return;
          const chunk = JSON.parse(data) as {
            error?: { message: string };
            choices?: { delta?: { content?: string } }[];
          };
          if (chunk.error) throw new ApiFailure(500, chunk.error.message);
          const text = chunk.choices?.[0]?.delta?.content;
          if (text) onToken(text);
        }
      }
    }
  },
};
