// GET/PUT /api/olympus/policy on real PostgreSQL: defaults, replace, per account, dual error shape.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { sql } from '@berth/test/support/postgres';

let api: TestApi;
beforeAll(async () => {
  api = await startTestApi();
  // Policies name catalog models: two chat models and an embedding model.
  for (const [name, kind] of [
    ['qwen2.5-7b-instruct', 'chat'],
    ['llama-3.1-8b-instruct', 'chat'],
    ['embed', 'embedding'],
  ]) {
    const model = {
      kind,
      backends: [{ baseUrl: 'http://127.0.0.1:9/v1', model: `org/${name}` }],
      pricing: { inputPerMTok: '0.10', outputPerMTok: '0.20' },
    };
    expect(
      (await api.admin(`/admin/models/${name}`, { method: 'PUT', body: JSON.stringify(model) })).status,
    ).toBe(201);
  }
});
afterAll(async () => api?.stop());

const put = (key: string, body: unknown) =>
  fetch(api.url + '/api/olympus/policy', {
    method: 'PUT',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
const get = async (key: string) => {
  const r = await fetch(api.url + '/api/olympus/policy', { headers: bearer(key) });
  expect(r.status).toBe(200);
  return r.json();
};
const policy = {
  allowed_models: ['qwen2.5-7b-instruct', 'llama-3.1-8b-instruct'],
  objective: 'quality',
  routes: [{ name: 'code', model: 'qwen2.5-7b-instruct', examples: ['Write a function', 'Fix this bug'] }],
};

describe('Olympus policy', () => {
  it('defaults, then replaced whole; another account keeps its own', async () => {
    const a = await api.newAccount();
    const b = await api.newAccount();
    expect(await get(a.inference)).toEqual({
      allowed_models: [],
      objective: 'cost',
      routes: [],
      route_threshold: 0.5,
      embedding_model: null,
      updated_at: null,
    });
    const r = await put(a.global, policy);
    expect(r.status).toBe(200);
    const stored = await r.json();
    expect(stored).toMatchObject(policy);
    expect(await get(a.inference)).toEqual(stored);
    expect((await get(b.global)).objective).toBe('cost');
    const replaced = await (await put(a.global, { objective: 'latency' })).json();
    expect(replaced).toMatchObject({ allowed_models: [], objective: 'latency', routes: [] });
    const tuned = await (await put(a.global, { ...policy, route_threshold: 0.8 })).json();
    expect(tuned).toMatchObject({ route_threshold: 0.8, embedding_model: null });
    expect(await get(a.inference)).toEqual(tuned);
  });

  it('invalid bodies: 400 in the dual shape naming the field; nothing stored', async () => {
    const a = await api.newAccount();
    const cases: [unknown, string, string | null][] = [
      [
        { objective: 'speed' },
        'Invalid request body: objective: must be one of "cost", "latency", "quality"',
        'objective',
      ],
      [
        { allowed_models: ['bad model'] },
        'Invalid request body: allowed_models.0: must be a catalog model name',
        'allowed_models.0',
      ],
      [
        { routes: [{ name: 'code', model: 'm', examples: [] }] },
        'Invalid request body: routes.0.examples: must have at least one example prompt',
        'routes.0.examples',
      ],
      [
        { routes: [policy.routes[0], policy.routes[0]] },
        'Invalid request body: routes: must have distinct names',
        'routes',
      ],
      [
        { route_threshold: -0.1 },
        'Invalid request body: route_threshold: must be a number from 0 to 1',
        'route_threshold',
      ],
      [
        { allowed_models: ['llama-3.1-8b-instruct'], routes: policy.routes },
        'Invalid request body: routes.0.model: must be one of allowed_models',
        'routes.0.model',
      ],
      [
        { embedding_model: 'no-such-model' },
        'Invalid request body: embedding_model: must be an embedding model of the catalog',
        'embedding_model',
      ],
      [{ extra: true }, 'Invalid request body: Unrecognized key: "extra"', null],
      // Names that can never be chosen: refused when written, each named.
      [
        { allowed_models: ['qwen2.5-7b-instruct', 'nope'] },
        'Invalid request body: allowed_models.1: no catalog model "nope" (GET /api/models lists them)',
        'allowed_models.1',
      ],
      [
        { allowed_models: ['embed'] },
        'Invalid request body: allowed_models.0: "embed" is an embedding model; Olympus chooses among chat and completion models',
        'allowed_models.0',
      ],
      [
        {
          routes: [
            { name: 'code', model: 'nope', examples: ['x'] },
            { name: 'vec', model: 'embed', examples: ['y'] },
          ],
        },
        'Invalid request body: routes.0.model: no catalog model "nope" (GET /api/models lists them); routes.1.model: "embed" is an embedding model; Olympus chooses among chat and completion models',
        'routes.0.model',
      ],
      [
        { embedding_model: 'qwen2.5-7b-instruct' },
        'Invalid request body: embedding_model: must be an embedding model of the catalog',
        'embedding_model',
      ],
    ];
    for (const [body, message, param] of cases) {
      const r = await put(a.global, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(await r.json()).toEqual({
        error: { message, type: 'invalid_request_error', code: 'validation_error', param },
        message,
      });
    }
    const malformed = await put(a.global, '{"objective":');
    expect(malformed.status).toBe(400);
    expect((await malformed.json()).error.code).toBe('invalid_json');
    expect(await sql(api.db.url, 'SELECT * FROM olympus_policies WHERE account_id = $1', [a.id])).toEqual([]);
  });

  it('keys: inference reads but cannot write, compute neither, revoked and missing keys are 401', async () => {
    const a = await api.newAccount();
    const denied = await put(a.inference, policy);
    expect(denied.status).toBe(403);
    expect((await denied.json()).error.code).toBe('insufficient_scope');
    expect((await fetch(api.url + '/api/olympus/policy', { headers: bearer(a.compute) })).status).toBe(403);
    const none = await fetch(api.url + '/api/olympus/policy');
    expect(none.status).toBe(401);
    expect((await none.json()).message).toBe('Missing or invalid Authorization header');
    const keys = (await (await fetch(api.url + '/api/keys', { headers: bearer(a.global) })).json()) as {
      data: { id: string; name: string }[];
    };
    await fetch(`${api.url}/api/keys/${keys.data.find((k) => k.name === 'global')!.id}`, {
      method: 'DELETE',
      headers: bearer(a.global),
    });
    const revoked = await put(a.global, policy);
    expect(revoked.status).toBe(401);
    expect((await revoked.json()).error.message).toBe('Invalid API key');
    expect(await sql(api.db.url, 'SELECT * FROM olympus_policies WHERE account_id = $1', [a.id])).toEqual([]);
  });
});
