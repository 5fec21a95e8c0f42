// Errors are data: one type carrying status, OpenAI `type`, `code` and message, rendered once by
// the error middleware in the shape of the route family (spec §7).

export type ErrorFamily = 'openai' | 'simple';

const table = {
  invalid_json: { status: 400, type: 'invalid_request_error', message: 'Malformed JSON in request body' },
  validation_error: { status: 400, type: 'invalid_request_error', message: 'Invalid request body' },
  malformed_path: {
    status: 400,
    type: 'invalid_request_error',
    message: 'Malformed percent-encoding in the request path',
  },
  missing_authorization: {
    status: 401,
    type: 'invalid_request_error',
    message: 'Missing or invalid Authorization header',
  },
  invalid_api_key: { status: 401, type: 'invalid_request_error', message: 'Invalid API key' },
  // A key that exists but no longer works: the spec's message, and a code that says why.
  api_key_revoked: { status: 401, type: 'invalid_request_error', message: 'Invalid API key' },
  api_key_expired: { status: 401, type: 'invalid_request_error', message: 'Invalid API key' },
  api_key_rotated: { status: 401, type: 'invalid_request_error', message: 'Invalid API key' },
  invalid_admin_token: { status: 401, type: 'invalid_request_error', message: 'Invalid admin token' },
  insufficient_scope: {
    status: 403,
    type: 'permission_error',
    message: 'This API key does not have the scope this route needs',
  },
  no_inference_key: {
    status: 403,
    type: 'permission_error',
    message: 'You must generate an API key first to use inference.',
  },
  csrf_failed: {
    status: 403,
    type: 'permission_error',
    message:
      'Missing or invalid CSRF token: send the X-CSRF-Token header with the csrfToken of GET /auth/session',
  },
  endpoint_not_owned: {
    status: 403,
    type: 'permission_error',
    message: 'Unauthorized access to dedicated endpoint',
  },
  endpoint_access_denied: { status: 403, type: 'permission_error', message: 'Forbidden: Access denied.' },
  insufficient_balance: {
    status: 402,
    type: 'insufficient_quota',
    message: 'Insufficient balance / payment required',
  },
  spend_limit_reached: {
    status: 402,
    type: 'insufficient_quota',
    message: 'This API key has reached its spend limit',
  },
  quota_exceeded: {
    status: 403,
    type: 'permission_error',
    message: 'An account quota would be exceeded',
  },
  tool_not_allowed: {
    status: 403,
    type: 'permission_error',
    message: 'This tool is not allowed for this key',
  },
  unknown_tool: { status: 400, type: 'invalid_request_error', message: 'Unknown tool' },
  olympus_not_enabled: {
    status: 400,
    type: 'invalid_request_error',
    message:
      'Olympus is not enabled for this API key. Enable it via POST /api/tools with tool_id = "olympus", or adjust the key\'s tool pin.',
  },
  chronos_not_enabled: {
    status: 403,
    type: 'permission_error',
    message:
      'Chronos is not enabled for this account. Enable it via POST /api/tools with tool_id = "chronos".',
  },
  chronos_disabled: {
    status: 403,
    type: 'permission_error',
    message: 'Chronos is turned off on this platform (CHRONOS_ENABLED=false); existing runs are kept',
  },
  builtin_tool: {
    status: 409,
    type: 'invalid_request_error',
    message: 'This is a built-in feature switch; it cannot be replaced or removed',
  },
  secrets_unavailable: {
    status: 503,
    type: 'api_error',
    message: 'Secrets cannot be stored: set BERTH_SECRETS_KEY on the API (e.g. `openssl rand -hex 32`)',
  },
  not_found: { status: 404, type: 'invalid_request_error', message: 'Not found' },
  model_not_found: { status: 404, type: 'invalid_request_error', message: 'The model does not exist' },
  catalog_conflict: { status: 409, type: 'invalid_request_error', message: 'The catalog entry is in use' },
  method_not_allowed: { status: 405, type: 'invalid_request_error', message: 'Method not allowed' },
  idempotency_conflict: {
    status: 409,
    type: 'invalid_request_error',
    message: 'This Idempotency-Key was already used with a different request',
  },
  balance_conflict: {
    status: 409,
    type: 'invalid_request_error',
    message: 'The balance not held by calls in flight is too low for this adjustment',
  },
  key_conflict: {
    status: 409,
    type: 'invalid_request_error',
    message: 'The key cannot be changed in its current state',
  },
  endpoint_conflict: {
    status: 409,
    type: 'invalid_request_error',
    message: 'The endpoint was changed by another request; read it again and retry',
  },
  endpoint_immutable: {
    status: 409,
    type: 'invalid_request_error',
    message: 'This field of an endpoint cannot be changed in place',
  },
  endpoint_not_wakeable: {
    status: 409,
    type: 'invalid_request_error',
    message: 'The endpoint cannot be woken in its current state',
  },
  request_too_large: { status: 413, type: 'invalid_request_error', message: 'Request body too large' },
  unsupported_media_type: {
    status: 415,
    type: 'invalid_request_error',
    message: 'Content-Type must be application/json',
  },
  rate_limited: { status: 429, type: 'rate_limit_error', message: 'Rate limit exceeded' },
  internal_error: { status: 500, type: 'api_error', message: 'Internal Server Error' },
  engine_unreachable: {
    status: 500,
    type: 'api_error',
    message: 'Failed to communicate with inference engine',
  },
  service_unavailable: { status: 503, type: 'api_error', message: 'Service temporarily unavailable' },
  gateway_timeout: { status: 504, type: 'api_error', message: 'Gateway timeout' },
  endpoint_building: { status: 503, type: 'api_error', message: 'The endpoint is still being provisioned' },
  endpoint_waking: { status: 503, type: 'api_error', message: 'The endpoint is waking up' },
  endpoint_failed: { status: 424, type: 'invalid_request_error', message: 'The endpoint has failed' },
  endpoint_unavailable: { status: 503, type: 'api_error', message: 'The endpoint is not available' },
  model_not_served: {
    status: 400,
    type: 'invalid_request_error',
    message: 'This endpoint does not serve that model',
  },
  engine_error: {
    status: 400,
    type: 'invalid_request_error',
    message: 'The inference engine refused the request',
  },
} as const satisfies Record<string, { status: number; type: string; message: string }>;

export type ErrorCode = keyof typeof table;

export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly type: string;
  readonly param: string | null;
  readonly headers: Record<string, string>;
  /** Machine-readable facts added to the body (snake_case, beside `message` and `code`). */
  readonly details: Record<string, unknown> | undefined;

  constructor(
    code: ErrorCode,
    options: {
      message?: string;
      param?: string | null;
      headers?: Record<string, string>;
      status?: number;
      type?: string;
      details?: Record<string, unknown>;
    } = {},
  ) {
    const entry = table[code];
    super(options.message ?? entry.message);
    this.name = 'ApiError';
    this.code = code;
    this.status = options.status ?? entry.status;
    this.type = options.type ?? entry.type;
    this.param = options.param ?? null;
    this.headers = options.headers ?? {};
    this.details = options.details;
  }
}

/** 404 for an endpoint id that is unknown (or gone). */
export const endpointNotFound = (id: string) =>
  new ApiError('not_found', { message: `Dedicated endpoint ${id} not found` });

/** 409 for a write that lost a race with another one (or names a generation that is not current). */
export const endpointChanged = (id: string) =>
  new ApiError('endpoint_conflict', {
    message: `Endpoint ${id} was changed by another request (its generation moved on): read it again and retry`,
  });

/** The body for an error in a route family: spec §7's dual OpenAI shape, or `{"error": "..."}`. */
export function errorBody(err: ApiError, family: ErrorFamily): Record<string, unknown> {
  if (family === 'openai') {
    return {
      error: { message: err.message, type: err.type, code: err.code, param: err.param, ...err.details },
      message: err.message,
    };
  }
  return { error: err.message, code: err.code, ...err.details };
}

/** The SSE frame for an error after a stream has started (openai-node turns it into an APIError). */
export function errorFrame(err: ApiError): string {
  return `data: ${JSON.stringify(errorBody(err, 'openai'))}\n\n`;
}

// OpenAI-style routes (spec §7.1) answer in the dual shape; every other route in the simple one.
const openaiRoutes =
  /^\/api\/(?:b\/|d\/|olympus(?:[/?]|$)|(?:chat\/completions|embeddings|models|completions|responses)(?:[/?]|$))/;

export function familyOf(path: string): ErrorFamily {
  return openaiRoutes.test(path) ? 'openai' : 'simple';
}
