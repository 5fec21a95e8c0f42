// Typed calls to the API, same origin, with the session cookie. Hand-written types of the answers
// the dashboard reads (kept to the fields it uses), checked against the API's OpenAPI document by
// the browser tests that drive every page.

export interface SessionInfo {
  signedIn: boolean;
  signIn: { available: boolean; label: string | null; development: boolean; url: string };
  account?: { id: string; name: string };
  identity?: { issuer: string; subject: string; name: string };
  csrfToken?: string;
  newKey?: { id: string; name: string; scope: string; prefix: string; value: string };
}

export type Scope = 'inference' | 'compute' | 'global';
export interface ApiKey {
  id: string;
  name: string;
  scope: Scope;
  prefix: string;
  pinnedModel: string | null;
  toolPin: string[];
  state: 'active' | 'revoked';
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
}
export type CreatedKey = ApiKey & { value: string };

export type Status = 'building' | 'up' | 'hibernated' | 'waking' | 'failed';
export type Label = 'PROVISIONING' | 'ONLINE' | 'SLEEPING' | 'WAKING UP' | 'FAILED';
export interface Endpoint {
  id: string;
  name: string;
  model: string;
  hardware: { gpuType: string; gpuCount: number };
  authMode: 'Private' | 'Public';
  scaling: { minReplicas: number; maxReplicas: number; idleTimeoutSeconds: number };
  status: Status;
  label: Label;
  reason: string | null;
  message: string | null;
  replicas: number;
  readyReplicas: number;
  baseUrl: string;
  createdAt: string | null;
}
export interface Hardware {
  id: string;
  gpuType: string;
  gpuMemoryGiB: number;
  allowedGpuCounts: number[];
  available: boolean;
}
export interface Balance {
  balance: string;
  currency: string;
  paid: boolean;
  freeQueriesRemaining: number;
}
export interface LedgerEntry {
  id: string;
  kind: string;
  amount: string;
  balanceAfter: string;
  reference: string | null;
  createdAt: string;
}
export interface UsageRow {
  day: string;
  model: string;
  requests: number;
  freeRequests: number;
  promptTokens: number;
  completionTokens: number;
  cost: string;
}
export interface InvoiceSummary {
  id: string;
  periodStart: string;
  periodEnd: string;
  currency: string;
  total: string;
  issuedAt: string;
}
export interface Upcoming {
  periodStart: string;
  periodEnd: string;
  total: string;
  currency: string;
  lines: { endpointId: string; gpuType: string; gpuCount: number; hours: string; amount: string }[];
}

/** An error answer of the API, with its message as the user should read it. */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code?: string,
  ) {
    super(message);
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
  const res = await fetch(path, { ...init, headers, credentials: 'same-origin' });
  if (!res.ok) throw await failure(res);
  return res;
}

const json = async <T>(path: string, init?: RequestInit): Promise<T> =>
  (await call(path, init)).json() as Promise<T>;
const send = (method: string, body?: unknown): RequestInit => ({
  method,
  ...(body === undefined ? {} : { body: JSON.stringify(body) }),
});

export const api = {
  session: () => json<SessionInfo>('/auth/session'),
  logout: () => call('/auth/logout', send('POST')),
  keys: () => json<{ data: ApiKey[] }>('/api/keys'),
  createKey: (body: { name: string; scope: Scope; pinnedModel?: string; toolPin?: string[] }) =>
    json<CreatedKey>('/api/keys', send('POST', body)),
  revokeKey: (id: string) => json<ApiKey>(`/api/keys/${encodeURIComponent(id)}`, send('DELETE')),
  endpoints: () => json<{ data: Endpoint[] }>('/api/endpoints'),
  endpoint: (id: string) => json<Endpoint>(`/api/endpoints/${encodeURIComponent(id)}`),
  createEndpoint: (body: {
    name?: string;
    model: string;
    hardware: { gpuType: string; gpuCount: number };
    authMode: 'Private' | 'Public';
    scaling: { minReplicas: number; maxReplicas: number; idleTimeoutSeconds: number };
  }) => json<Endpoint>('/api/endpoints', send('POST', body)),
  wake: (id: string) => call(`/api/endpoints/${encodeURIComponent(id)}/wake`, send('POST')),
  terminate: (id: string) => call(`/api/endpoints/${encodeURIComponent(id)}`, send('DELETE')),
  logs: (id: string, signal: AbortSignal) =>
    call(`/api/endpoints/${encodeURIComponent(id)}/logs?follow=true`, { signal }),
  hardware: () => json<{ data: Hardware[] }>('/api/hardware'),
  models: () => json<{ data: { id: string }[] }>('/api/models'),
  balance: () => json<Balance>('/api/billing/balance'),
  ledger: () => json<{ data: LedgerEntry[] }>('/api/billing/ledger?limit=20'),
  usage: () => json<{ data: UsageRow[]; currency: string }>('/api/billing/usage'),
  invoices: () => json<{ data: InvoiceSummary[]; upcoming: Upcoming }>('/api/billing/invoices'),
  /** Managed tools (issue 14): null while the API has no such route. */
  async tools(): Promise<{ id: string; name?: string; enabled?: boolean }[] | null> {
    const res = await fetch('/api/tools', { credentials: 'same-origin' });
    if (res.status === 404) return null;
    if (!res.ok) throw await failure(res);
    const body = (await res.json()) as { data?: { id: string; name?: string; enabled?: boolean }[] };
    return body.data ?? [];
  },
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
