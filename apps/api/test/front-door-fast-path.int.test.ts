// The front door's fast routes (RouteSpec.fast, http/fast-entry.ts): `/api/chat/completions` and the
// other OpenAI-compatible calls are served ahead of Express by the API's request listener, and must
// answer exactly as the registered routes do. Each request is sent twice to the same API (started as
// `npm start` starts it): in its canonical spelling (the fast route takes it) and with a trailing slash
// (Express's non-strict matching gives it to the registered route). Status, error body and the headers
// a client reads must be the same. Real keys and billing on PostgreSQL, a real engine simulator.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fastRouteTable } from '../src/http/fast-entry.ts';
import type { FastRun } from '../src/http/routes.ts';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';

const MAX_BODY_BYTES = 4096;
let api: TestApi;
let sim: Awaited<ReturnType<typeof startEngineSim>>;
let owner: { id: string; global: string; inference: string; compute: string; revoked: string };
let broke: string;

beforeAll(async () => {
  sim = await startEngineSim({ model: 'org/front', ttftMs: 0, itlMs: 0, outputTokens: 4 });
  api = await startTestApi({ MAX_BODY_BYTES: String(MAX_BODY_BYTES), BERTH_FREE_QUERIES: '0' });
  await api.chatModel('front', { engineUrl: sim.url, model: 'org/front' });
  const acct = await api.newAccount();
  await api.admin(`/admin/accounts/${acct.id}/credits`, {
    method: 'POST',
    body: JSON.stringify({ amount: '5.00' }),
    headers: { 'idempotency-key': randomUUID() },
  });
  const revoked = (await (
    await fetch(api.url + '/api/keys', {
      method: 'POST',
      headers: { ...bearer(acct.global), 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'front revoked', scope: 'inference' }),
    })
  ).json()) as { id: string; value: string };
  await fetch(`${api.url}/api/keys/${revoked.id}`, { method: 'DELETE', headers: bearer(acct.global) });
  owner = { ...acct, revoked: revoked.value };
  broke = (await api.newAccount()).global; // never credited, no free queries: 402
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await sim?.close();
});

interface Answer {
  status: number;
  body: string;
  headers: Record<string, string | null>;
}

const SHOWN = ['content-type', 'retry-after', 'allow', 'www-authenticate', 'x-berth-model'];

async function send(path: string, init: RequestInit): Promise<Answer> {
  const res = await fetch(api.url + path, init);
  const headers: Record<string, string | null> = {};
  for (const h of SHOWN) headers[h] = res.headers.get(h);
  // How long a 402 waited for calls in flight depends on the moment, not on the path.
  const body = (await res.text()).replace(/"waited_ms":\d+/, '"waited_ms":0');
  return { status: res.status, body, headers };
}

/** The same request through the fast route and through the registered route: the two answers. */
async function both(path: string, init: () => RequestInit): Promise<[Answer, Answer]> {
  return [await send(path, init()), await send(`${path}/`, init())];
}

const chat = { model: 'front', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 };
const post =
  (key: string | undefined, body: string, type = 'application/json') =>
  (): RequestInit => ({
    method: 'POST',
    headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), 'content-type': type },
    body,
  });

describe('the front door’s fast routes answer as the registered routes do', () => {
  const cases: { what: string; init: () => RequestInit; status: number; error: Record<string, unknown> }[] = [
    {
      what: 'an unknown model',
      init: () => post(owner.inference, JSON.stringify({ ...chat, model: 'nosuch' }))(),
      status: 404,
      error: { code: 'model_not_found' },
    },
    {
      what: 'a revoked key',
      init: () => post(owner.revoked, JSON.stringify(chat))(),
      status: 401,
      error: { code: 'api_key_revoked', message: 'Invalid API key' },
    },
    {
      what: 'no key',
      init: () => post(undefined, JSON.stringify(chat))(),
      status: 401,
      error: { code: 'missing_authorization' },
    },
    {
      what: 'a key of the wrong scope',
      init: () => post(owner.compute, JSON.stringify(chat))(),
      status: 403,
      error: { code: 'insufficient_scope' },
    },
    {
      what: 'malformed JSON',
      init: () => post(owner.inference, '{"model": "front", "messages": [')(),
      status: 400,
      error: { code: 'invalid_json', message: 'Malformed JSON in request body' },
    },
    {
      what: 'a JSON array',
      init: () => post(owner.inference, '[1, 2]')(),
      status: 400,
      error: { code: 'validation_error', message: 'The request body must be a JSON object' },
    },
    {
      what: 'an oversized body',
      init: () => post(owner.inference, JSON.stringify({ ...chat, pad: 'x'.repeat(MAX_BODY_BYTES) }))(),
      status: 413,
      error: { code: 'request_too_large', message: 'Request body too large' },
    },
    {
      what: 'another media type',
      init: () => post(owner.inference, 'model=front', 'application/x-www-form-urlencoded')(),
      status: 415,
      error: { code: 'unsupported_media_type' },
    },
    {
      what: 'an account that cannot pay',
      init: () => post(broke, JSON.stringify(chat))(),
      status: 402,
      error: { message: 'Insufficient balance / payment required' },
    },
  ];
  it.each(cases)('$what: $status', async ({ init, status, error }) => {
    const [fast, routed] = await both('/api/chat/completions', init);
    expect(fast).toEqual(routed);
    expect(fast.status).toBe(status);
    expect(JSON.parse(fast.body).error).toMatchObject(error);
  });

  it('a chat completion: the same status, headers and answer, and both charged', async () => {
    const [fast, routed] = await both('/api/chat/completions', post(owner.inference, JSON.stringify(chat)));
    expect(fast.status, fast.body).toBe(200);
    expect(fast.headers).toEqual(routed.headers);
    expect(fast.headers['x-berth-model']).toBe('front');
    const strip = (b: string) => {
      const { id: _id, created: _created, ...rest } = JSON.parse(b) as Record<string, unknown>;
      return rest;
    };
    expect(strip(fast.body)).toEqual(strip(routed.body));
    expect(strip(fast.body)).toMatchObject({ model: 'front', usage: { completion_tokens: 4 } });
  });

  it('a streamed chat completion: the same frames', async () => {
    const [fast, routed] = await both(
      '/api/chat/completions',
      post(owner.inference, JSON.stringify({ ...chat, stream: true })),
    );
    expect(fast.status).toBe(200);
    expect(fast.headers).toEqual(routed.headers);
    const frames = (b: string) =>
      b.replace(/"id":"[^"]*"/g, '"id":"…"').replace(/"created":\d+/g, '"created":0');
    expect(frames(fast.body)).toEqual(frames(routed.body));
    expect(fast.body.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it('a text completion and the Responses API: the same status on both paths', async () => {
    const [fast, routed] = await both(
      '/api/completions',
      post(owner.inference, JSON.stringify({ model: 'front', prompt: 'hi', max_tokens: 4 })),
    );
    expect([fast.status, routed.status]).toEqual([200, 200]);
    const [rFast, rRouted] = await both(
      '/api/responses',
      post(owner.inference, JSON.stringify({ model: 'front', input: 'hi', max_output_tokens: 4 })),
    );
    expect([rFast.status, rRouted.status]).toEqual([200, 200]);
  });
});

describe('dispatch (fastRouteTable)', () => {
  it('takes the exact path and method, with a query; leaves other spellings, methods and session calls', () => {
    const run: FastRun = async () => {};
    const table = fastRouteTable(new Map([['/api/chat/completions', { method: 'POST', run }]]));
    const req = (
      method: string,
      url: string,
      headers: Record<string, string> = { authorization: 'Bearer k' },
    ) => ({ method, url, headers }) as unknown as IncomingMessage;
    expect(table.match(req('POST', '/api/chat/completions'))).toBe(run);
    expect(table.match(req('POST', '/api/chat/completions?x=1'))).toBe(run);
    // A key and a session cookie: the key decides, as on the registered route.
    expect(
      table.match(
        req('POST', '/api/chat/completions', { authorization: 'Bearer k', cookie: 'berth_session=s' }),
      ),
    ).toBe(run);
    for (const [method, url, headers] of [
      ['POST', '/api/chat/completions/', undefined],
      ['POST', '/API/chat/completions', undefined],
      ['POST', '/api/chat%2Fcompletions', undefined],
      ['GET', '/api/chat/completions', undefined],
      ['OPTIONS', '/api/chat/completions', undefined],
      ['POST', '/api/chat/completions', { cookie: 'berth_session=s' }],
    ] as const)
      expect([method, url, table.match(req(method, url, headers))]).toEqual([method, url, undefined]);
  });
});
