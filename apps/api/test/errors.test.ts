import { describe, expect, it } from 'vitest';
import { ApiError, errorBody, errorFrame, familyOf } from '../src/platform/errors.ts';

describe('error contract', () => {
  it('OpenAI-style routes answer in the dual shape with the same text twice', () => {
    expect(errorBody(new ApiError('invalid_api_key'), 'openai')).toEqual({
      error: {
        message: 'Invalid API key',
        type: 'invalid_request_error',
        code: 'invalid_api_key',
        param: null,
      },
      message: 'Invalid API key',
    });
  });

  it('other routes answer {"error": "<message>", "code"}', () => {
    expect(errorBody(new ApiError('missing_authorization'), 'simple')).toEqual({
      error: 'Missing or invalid Authorization header',
      code: 'missing_authorization',
    });
  });

  it('reproduces the messages of spec §7 exactly', () => {
    const messages = Object.fromEntries(
      (
        [
          'invalid_api_key',
          'missing_authorization',
          'endpoint_not_owned',
          'endpoint_access_denied',
          'service_unavailable',
          'engine_unreachable',
          'internal_error',
        ] as const
      ).map((c) => [c, [new ApiError(c).status, new ApiError(c).message]]),
    );
    expect(messages).toEqual({
      invalid_api_key: [401, 'Invalid API key'],
      missing_authorization: [401, 'Missing or invalid Authorization header'],
      endpoint_not_owned: [403, 'Unauthorized access to dedicated endpoint'],
      endpoint_access_denied: [403, 'Forbidden: Access denied.'],
      service_unavailable: [503, 'Service temporarily unavailable'],
      engine_unreachable: [500, 'Failed to communicate with inference engine'],
      internal_error: [500, 'Internal Server Error'],
    });
    expect(new ApiError('rate_limited').type).toBe('rate_limit_error');
  });

  it('renders an SSE error frame the OpenAI SDK reads as an error', () => {
    expect(errorFrame(new ApiError('invalid_api_key'))).toBe(
      'data: {"error":{"message":"Invalid API key","type":"invalid_request_error","code":"invalid_api_key","param":null},"message":"Invalid API key"}\n\n',
    );
  });

  it('knows which routes are OpenAI-style', () => {
    for (const p of [
      '/api/chat/completions',
      '/api/b/chat/completions',
      '/api/d/endpt-x/chat/completions',
      '/api/models',
      '/api/embeddings',
      '/api/completions',
      '/api/responses',
      '/api/olympus/x',
      '/api/models?x=1',
    ])
      expect(familyOf(p), p).toBe('openai');
    for (const p of [
      '/api/keys',
      '/api/keys/key_1',
      '/admin/accounts',
      '/api/endpoints',
      '/api/tools',
      '/api/hardware',
      '/healthz',
      '/api/modelsx',
    ])
      expect(familyOf(p), p).toBe('simple');
  });
});
