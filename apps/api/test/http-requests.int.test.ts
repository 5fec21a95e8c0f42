// What the HTTP layer refuses, in the route family's error shape, on a local-mode API: the route label
// metrics keep on errors, client mistakes in bodies and paths (400, never 500, nothing stored), bodies
// read only after authentication and only for so long, and unsupported methods (405 with Allow).
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, bearer, type TestApi } from '@berth/test/support/api';
import { startLocalApi, type LocalApi } from './support/local-api.ts';

let local: LocalApi;
let api: TestApi;
let acct: LocalApi['acct'];

beforeAll(async () => {
  local = await startLocalApi({ BODY_TIMEOUT_MS: '1500' });
  ({ api, acct } = local);
});

afterAll(async () => {
  await local?.stop();
});

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });

describe('metric route labels keep the mount point on errors', () => {
  it('labels a 401 on /api/keys as /api/keys', async () => {
    expect((await fetch(`${api.url}/api/keys`)).status).toBe(401);
    expect((await fetch(`${api.url}/api/keys`, { headers: bearer(acct.global) })).status).toBe(200);
    const metrics = await (await fetch(`${api.url}/metrics`)).text();
    expect(metrics).toMatch(/route="\/api\/keys",method="GET",status="401"/);
    expect(metrics).not.toMatch(/route="\/keys"/);
  });
});

/** A raw request: the bytes of the path and body exactly as given (fetch would re-encode them). */
function raw(
  method: string,
  pathname: string,
  headers: Record<string, string> = {},
  body?: Buffer | string,
): Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(api.url);
    const req = http.request({ host: u.hostname, port: u.port, method, path: pathname, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const keyNames = async () =>
  (
    (await (await fetch(`${api.url}/api/keys`, { headers: bearer(acct.global) })).json()) as {
      data: { name: string }[];
    }
  ).data.map((k) => k.name);

const endpointIds = async () =>
  (
    (await (await fetch(`${api.url}/api/endpoints`, { headers: bearer(acct.global) })).json()) as {
      data: { id: string }[];
    }
  ).data.map((e) => e.id);

describe('client mistakes are 400s in the route’s shape, never 500, nothing stored', () => {
  it.each([
    ['NUL in a key name', '/api/keys', '{"name":"a\\u0000b","scope":"inference"}', 'name'],
    ['a lone surrogate in a key name', '/api/keys', '{"name":"a\\ud800b","scope":"inference"}', 'name'],
    [
      'NUL in a pinned model',
      '/api/keys',
      '{"name":"p","scope":"inference","pinnedModel":"m\\u0000"}',
      'pinnedModel',
    ],
    [
      'a newline in a key name',
      '/api/keys',
      '{"name":"a\\n# event Normal Forged","scope":"inference"}',
      'name',
    ],
    [
      'a forged event line in an endpoint name',
      '/api/endpoints',
      '{"name":"a\\n# event Normal Forged","model":"Qwen/Qwen2.5-0.5B-Instruct","hardware":{"gpuType":"nvidia-l4-24gb","gpuCount":1}}',
      'name',
    ],
    [
      'NUL in a revision',
      '/api/endpoints',
      '{"revision":"main\\u0000","model":"Qwen/Qwen2.5-0.5B-Instruct","hardware":{"gpuType":"nvidia-l4-24gb","gpuCount":1}}',
      'revision',
    ],
  ])('%s', async (_what, pathname, body, param) => {
    const before = await keyNames();
    const endpointsBefore = await endpointIds();
    const res = await raw(
      'POST',
      pathname,
      { ...json(acct.global), 'content-length': String(Buffer.byteLength(body)) },
      body,
    );
    expect(res.status, res.text).toBe(400);
    const error = JSON.parse(res.text) as { error: string; code: string };
    expect(error.code).toBe('validation_error');
    expect(error.error).toContain(param);
    expect(await keyNames()).toEqual(before);
    expect(await endpointIds()).toEqual(endpointsBefore);
  });

  it.each([
    ['GET', '/api/endpoints/%ff%fe', 'simple'],
    ['GET', '/api/endpoints/%', 'simple'],
    ['DELETE', '/api/keys/%E0%A4%A', 'simple'],
    ['GET', '/admin/accounts/%ff/keys', 'simple'],
    ['POST', '/api/d/%E0%A4%A/chat/completions', 'openai'],
  ])('malformed percent-encoding: %s %s', async (method, pathname, family) => {
    const token = pathname.startsWith('/admin') ? ADMIN_TOKEN : acct.global;
    const res = await raw(method, pathname, bearer(token));
    expect(res.status, res.text).toBe(400);
    const body = JSON.parse(res.text) as { error: unknown; message?: string };
    if (family === 'openai') expect(body.message).toMatch(/percent-encoding/);
    else expect(body.error).toMatch(/percent-encoding/);
  });

  // Found by `npm run chaos -- fuzz` (seed 160027450): a NUL in an id reached PostgreSQL, a 500.
  it.each([
    ['GET', '/admin/accounts/%00/billing/invoices/1', ADMIN_TOKEN, 'id'],
    ['GET', '/admin/accounts/acct%00x/quotas', ADMIN_TOKEN, 'id'],
    ['DELETE', '/api/keys/key%00', 'global', 'id'],
  ])(
    'a NUL character in a path parameter: %s %s is a 400 naming it',
    async (method, pathname, who, param) => {
      const before = await keyNames();
      const res = await raw(method, pathname, bearer(who === 'global' ? acct.global : who));
      expect(res.status, res.text).toBe(400);
      expect(JSON.parse(res.text)).toEqual({
        error: `The path parameter ${param} must not contain a NUL character (%00)`,
        code: 'malformed_path',
      });
      expect(await keyNames()).toEqual(before);
    },
  );

  it.each(['gzip', 'br', 'deflate'])('a %s body that does not decode is a 400', async (encoding) => {
    const before = await keyNames();
    const res = await raw(
      'POST',
      '/api/keys',
      { ...json(acct.global), 'content-encoding': encoding, 'content-length': '12' },
      'not-encoded!',
    );
    expect(res.status, res.text).toBe(400);
    expect(JSON.parse(res.text)).toMatchObject({ code: 'invalid_json' });
    expect(await keyNames()).toEqual(before);
  });

  it('a 100k-deep array in an unknown field on /api/d is a 400 in the OpenAI shape', async () => {
    const id = await local.createEndpoint();
    const body = `{"messages":[{"role":"user","content":"hi"}],"junk":${'['.repeat(100_000)}${']'.repeat(100_000)}}`;
    const res = await raw(
      'POST',
      `/api/d/${id}/chat/completions`,
      { ...json(acct.inference), 'content-length': String(body.length) },
      body,
    );
    expect(res.status, res.text).toBe(400);
    expect(JSON.parse(res.text)).toMatchObject({
      error: { type: 'invalid_request_error', code: 'validation_error' },
      message: expect.stringMatching(/nested/),
    });
  });
});

/** Sends `head` on a raw socket, then `drip` one byte at a time; resolves with what came back. */
function dripping(head: string, dripMs = 100): Promise<{ text: string; ms: number }> {
  return new Promise((resolve, reject) => {
    const u = new URL(api.url);
    const started = Date.now();
    const socket = net.connect(Number(u.port), u.hostname, () => socket.write(head));
    let text = '';
    const timer = setInterval(() => socket.writable && socket.write('a'), dripMs);
    socket.setEncoding('utf8').on('data', (d: string) => (text += d));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearInterval(timer);
      resolve({ text, ms: Date.now() - started });
    });
    setTimeout(() => {
      clearInterval(timer);
      socket.destroy();
      reject(new Error(`still open after 10 s; got: ${text}`));
    }, 10_000);
  });
}

describe('bodies are read only after authentication, and only for so long', () => {
  it.each([
    ['a huge Content-Length', { 'content-type': 'application/json', 'content-length': '999999999' }, ''],
    ['another media type', { 'content-type': 'text/plain', 'content-length': '5' }, 'hello'],
    ['malformed JSON', { 'content-type': 'application/json', 'content-length': '5' }, '{"a":'],
  ])('no key and %s: 401, not 400/413/415', async (_what, headers, body) => {
    const res = await raw('POST', '/api/keys', headers, body);
    expect(res.status, res.text).toBe(401);
    expect(JSON.parse(res.text)).toEqual({
      error: 'Missing or invalid Authorization header',
      code: 'missing_authorization',
    });
  });

  it('an unauthenticated client dripping a body gets 401 at once and its connection closed', async () => {
    const { text, ms } = await dripping(
      'POST /api/endpoints HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n',
    );
    expect(text).toMatch(/^HTTP\/1\.1 401 /);
    expect(ms).toBeLessThan(2_000);
  });

  it('an authenticated client dripping a body is cut off after BODY_TIMEOUT_MS with 408', async () => {
    const { text, ms } = await dripping(
      `POST /api/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${acct.global}\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n`,
    );
    expect(text).toMatch(/^HTTP\/1\.1 408 /);
    expect(ms).toBeGreaterThanOrEqual(1_500);
    expect(ms).toBeLessThan(4_000);
  });
});

describe('unsupported methods are 405 method_not_allowed with Allow', () => {
  it.each([
    ['PUT', '/api/keys', 'GET, HEAD, POST', 'simple'],
    ['PUT', '/api/keys/key_x', 'DELETE, GET, HEAD, PATCH', 'simple'],
    ['DELETE', '/api/d/endpt-abc/chat/completions', 'POST', 'openai'],
    ['POST', '/healthz', 'GET, HEAD', 'simple'],
    ['PUT', '/admin/accounts', 'GET, HEAD, POST', 'simple'],
  ])('%s %s', async (method, pathname, allow, family) => {
    const token = pathname.startsWith('/admin') ? ADMIN_TOKEN : acct.global;
    const res = await raw(method, pathname, bearer(token));
    expect(res.status, res.text).toBe(405);
    expect(res.headers.allow).toBe(allow);
    const body = JSON.parse(res.text) as Record<string, unknown>;
    if (family === 'openai')
      expect(body).toMatchObject({ error: { code: 'method_not_allowed', type: 'invalid_request_error' } });
    else expect(body).toMatchObject({ code: 'method_not_allowed' });
  });

  it('an unknown path is still 404', async () => {
    expect((await raw('GET', '/api/nope', bearer(acct.global))).status).toBe(404);
  });
});
