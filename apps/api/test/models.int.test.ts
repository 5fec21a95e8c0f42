import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';

let api: TestApi;
let acct: Awaited<ReturnType<TestApi['newAccount']>>;
beforeAll(async () => {
  // The catalog from BERTH_MODELS_FILE (YAML), as the Helm chart writes it.
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'berth-models-')), 'models.yaml');
  const entry = (upstream: string) =>
    `    kind: chat\n    backends: [{baseUrl: "http://127.0.0.1:9/v1", model: ${upstream}}]\n    pricing: {inputPerMTok: "0.10", outputPerMTok: "0.30"}\n`;
  writeFileSync(file, `models:\n  model-b:\n${entry('b')}  model-a:\n${entry('a')}`);
  api = await startTestApi({ BERTH_MODELS_FILE: file });
  acct = await api.newAccount();
});
afterAll(async () => api?.stop());

const dual = (message: string, code: string, type = 'invalid_request_error') => ({
  error: { message, type, code, param: null },
  message,
});

describe('GET /api/models', () => {
  it('lists the catalog in OpenAI shape, for inference and global keys', async () => {
    for (const key of [acct.inference, acct.global]) {
      const res = await fetch(api.url + '/api/models', { headers: bearer(key) });
      expect(res.status).toBe(200);
      const body = await res.json();
      expect(body).toEqual({
        object: 'list',
        data: [
          { id: 'model-a', object: 'model', created: expect.any(Number), owned_by: 'berth', kind: 'chat' },
          { id: 'model-b', object: 'model', created: expect.any(Number), owned_by: 'berth', kind: 'chat' },
        ],
      });
    }
  });

  it('works with the official OpenAI SDK', async () => {
    const client = new OpenAI({ baseURL: api.url + '/api', apiKey: acct.inference });
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toEqual(['model-a', 'model-b']);
  });

  it('the SDK sees 401 Invalid API key as AuthenticationError', async () => {
    const client = new OpenAI({
      baseURL: api.url + '/api',
      apiKey: 'svc_live_' + 'x'.repeat(33),
      maxRetries: 0,
    });
    const err = await client.models.list().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((err as InstanceType<typeof OpenAI.AuthenticationError>).message).toContain('Invalid API key');
  });
});

describe('authentication on an OpenAI-style route', () => {
  it('no Authorization header, or not a Bearer one: 401 Missing or invalid Authorization header', async () => {
    for (const headers of [
      {},
      { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` },
      { authorization: 'Bearer' },
      { authorization: 'Bearer ' },
    ]) {
      const res = await fetch(api.url + '/api/models', { headers });
      expect(res.status).toBe(401);
      expect(await res.json()).toEqual(
        dual('Missing or invalid Authorization header', 'missing_authorization'),
      );
    }
  });

  it('malformed, unknown or revoked key: 401 Invalid API key', async () => {
    const other = await api.newAccount();
    const keys = await (await fetch(api.url + '/api/keys', { headers: bearer(other.global) })).json();
    const def = keys.data.find((k: { name: string }) => k.name === 'default');
    expect((await fetch(api.url + '/api/models', { headers: bearer(other.inference) })).status).toBe(200);
    await fetch(`${api.url}/api/keys/${def.id}`, { method: 'DELETE', headers: bearer(other.global) });
    for (const key of [
      'garbage',
      'svc_live_' + 'Q'.repeat(33),
      'svc_live_' + 'Q'.repeat(40),
      other.inference,
    ]) {
      const res = await fetch(api.url + '/api/models', { headers: bearer(key) });
      expect(res.status, key).toBe(401);
      // A revoked key says so in its code; the message stays the spec's.
      const code = key === other.inference ? 'api_key_revoked' : 'invalid_api_key';
      expect(await res.json()).toEqual(dual('Invalid API key', code));
    }
  });

  it('a compute key cannot call inference routes: 403 naming the scope', async () => {
    const res = await fetch(api.url + '/api/models', { headers: bearer(acct.compute) });
    expect(res.status).toBe(403);
    const message =
      'This API key has scope "compute"; this route needs a key with scope "inference" or "global"';
    expect(await res.json()).toEqual(dual(message, 'insufficient_scope', 'permission_error'));
  });
});

describe('every response', () => {
  it("carries x-request-id: the caller's when sane, a new one otherwise", async () => {
    const mine = await fetch(api.url + '/api/models', { headers: { 'x-request-id': 'trace-123' } });
    expect(mine.headers.get('x-request-id')).toBe('trace-123');
    const bad = await fetch(api.url + '/healthz', { headers: { 'x-request-id': 'has spaces and $ymbols' } });
    expect(bad.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    const ok = await fetch(api.url + '/healthz');
    expect(ok.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('unknown routes: 404 in the family shape', async () => {
    const openai = await fetch(api.url + '/api/olympus/nothing-here', { method: 'POST' });
    expect(openai.status).toBe(404);
    expect(await openai.json()).toEqual(dual('Not found', 'not_found'));
    const simple = await fetch(api.url + '/api/nothing-here');
    expect(simple.status).toBe(404);
    expect(await simple.json()).toEqual({ error: 'Not found', code: 'not_found' });
  });
});

describe('operations routes', () => {
  it('/healthz, /readyz (database reachable), /metrics, /openapi.json', async () => {
    expect(await (await fetch(api.url + '/healthz')).json()).toEqual({ status: 'ok' });
    const ready = await fetch(api.url + '/readyz');
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ready', checks: { database: 'ok' } });

    await fetch(api.url + '/api/models', { headers: bearer(acct.inference) });
    const metrics = await (await fetch(api.url + '/metrics')).text();
    expect(metrics).toMatch(
      /^berth_http_requests_total\{route="\/api\/models",method="GET",status="200"\} \d+$/m,
    );
    expect(metrics).toMatch(/^berth_key_cache_lookups_total\{result="hit"\} [1-9]\d*$/m);
    expect(metrics).not.toContain(acct.id);

    const doc = await (await fetch(api.url + '/openapi.json')).json();
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining([
        '/admin/accounts',
        '/admin/accounts/{id}/keys',
        '/api/keys',
        '/api/keys/{id}',
        '/api/models',
      ]),
    );
    expect(
      doc.paths['/api/keys'].post.requestBody.content['application/json'].schema.properties.scope.enum,
    ).toEqual(['inference', 'compute', 'global']);
  });
});
