// PUT (create-or-update by id), PATCH, the failed-endpoint wake answer and whoami, through the API in
// local mode (real PostgreSQL, real engine-simulator processes, the operator's pre-start checks
// against a fake hub): what `berth apply` and the Terraform provider stand on.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { startFakeHub } from '@berth/test/support/fake-hub';

let api: TestApi;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let dataDir: string;
let acct: Awaited<ReturnType<TestApi['newAccount']>>;
let other: Awaited<ReturnType<TestApi['newAccount']>>;

beforeAll(async () => {
  // 20 B parameters in BF16 ≈ 37 GiB: too large for one L4 (24 GiB), fits one H100 (80 GiB).
  hub = await startFakeHub({ 'org/mid': { parameters: { BF16: 20_000_000_000 } }, 'org/small': {} });
  dataDir = mkdtempSync(path.join(tmpdir(), 'berth-writes-'));
  api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: dataDir,
    BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 0',
    HF_ENDPOINT: hub.url,
  });
  acct = await api.newAccount();
  other = await api.newAccount();
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await hub?.close();
  await api?.db.drop();
  rmSync(dataDir, { recursive: true, force: true });
});

const send = (method: string, pathname: string, key: string, body?: unknown, headers = {}) =>
  fetch(api.url + pathname, {
    method,
    headers: { ...bearer(key), 'content-type': 'application/json', ...headers },
    ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
  });
const get = async (id: string) => (await send('GET', `/api/endpoints/${id}`, acct.compute)).json();
const small = {
  model: 'org/small',
  hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
  scaling: { idleTimeoutSeconds: 60 },
};

describe('PUT /api/endpoints/{id}', () => {
  it('creates (201), does nothing the second time (200, same generation), changes in place (200, new generation)', async () => {
    const id = 'endpt-put-one';
    const first = await send('PUT', `/api/endpoints/${id}`, acct.compute, { ...small, name: 'one' });
    expect(first.status).toBe(201);
    expect(first.headers.get('etag')).toBe('"1"');
    expect(await first.json()).toMatchObject({ id, name: 'one', status: 'building', generation: 1 });

    const again = await send('PUT', `/api/endpoints/${id}`, acct.compute, { ...small, name: 'one' });
    expect(again.status).toBe(200);
    expect(await again.json()).toMatchObject({ id, generation: 1 });

    await eventually(async () => (await get(id)).status === 'up', { timeout: 30_000 });
    // The ETag names the generation, not the status: a conditional GET (what a browser's cache sends
    // when polling) still gets the new status, never a 304 that would keep showing `building`.
    const polled = await send('GET', `/api/endpoints/${id}`, acct.compute, undefined, {
      'if-none-match': '"1"',
    });
    expect(polled.status).toBe(200);
    expect(polled.headers.get('cache-control')).toBe('no-store');
    expect(polled.headers.get('etag')).toBe('"1"');
    expect(await polled.json()).toMatchObject({ id, status: 'up', label: 'ONLINE' });
    const changed = await send('PUT', `/api/endpoints/${id}`, acct.compute, {
      ...small,
      name: 'one',
      scaling: { idleTimeoutSeconds: 120 },
    });
    expect(changed.status).toBe(200);
    expect(changed.headers.get('etag')).toBe('"2"');
    expect(await changed.json()).toMatchObject({ generation: 2, scaling: { idleTimeoutSeconds: 120 } });
    const seen = await eventually(
      async () => {
        const e = await get(id);
        return e.observedGeneration === 2 && e.status === 'up' ? e : false;
      },
      { timeout: 30_000, description: 'generation 2 rolled out' },
    );
    expect(seen.scaling.idleTimeoutSeconds).toBe(120);
  }, 90_000);

  it('a different model is 409 and changes nothing', async () => {
    const id = 'endpt-put-model';
    expect((await send('PUT', `/api/endpoints/${id}`, acct.compute, small)).status).toBe(201);
    const res = await send('PUT', `/api/endpoints/${id}`, acct.compute, { ...small, model: 'org/other' });
    expect(res.status).toBe(409);
    expect(await res.json()).toEqual({
      error: `model cannot be changed in place: ${id} serves org/small. Create a new endpoint for org/other (or delete ${id} and create it again)`,
      code: 'endpoint_immutable',
    });
    expect(await get(id)).toMatchObject({ model: 'org/small', generation: 1 });
  });

  it('If-Match with a generation that moved on is 409; the current one is accepted', async () => {
    const id = 'endpt-put-ifmatch';
    expect((await send('PUT', `/api/endpoints/${id}`, acct.compute, small)).status).toBe(201);
    const a = await send(
      'PATCH',
      `/api/endpoints/${id}`,
      acct.compute,
      { scaling: { idleTimeoutSeconds: 90 } },
      {
        'if-match': '"1"',
      },
    );
    expect(a.status).toBe(200);
    const b = await send(
      'PATCH',
      `/api/endpoints/${id}`,
      acct.compute,
      { scaling: { idleTimeoutSeconds: 30 } },
      {
        'if-match': '"1"',
      },
    );
    expect(b.status).toBe(409);
    expect(await b.json()).toEqual({
      error: `Endpoint ${id} was changed by another request (its generation moved on): read it again and retry`,
      code: 'endpoint_conflict',
    });
    expect(await get(id)).toMatchObject({ generation: 2, scaling: { idleTimeoutSeconds: 90 } });
    const bad = await send('PATCH', `/api/endpoints/${id}`, acct.compute, {}, { 'if-match': 'yesterday' });
    expect(bad.status).toBe(400);
  });

  it('concurrent creates of one id with different bodies: one 201, the other a 200 update or a 409, never two endpoints', async () => {
    const id = 'endpt-put-race';
    const [a, b] = await Promise.all([
      send('PUT', `/api/endpoints/${id}`, acct.compute, small),
      send('PUT', `/api/endpoints/${id}`, acct.compute, { ...small, scaling: { idleTimeoutSeconds: 300 } }),
    ]);
    expect([a.status, b.status].filter((s) => s === 201)).toHaveLength(1);
    expect([a.status, b.status].every((s) => s === 201 || s === 200 || s === 409)).toBe(true);
    const list = await (await send('GET', '/api/endpoints', acct.compute)).json();
    expect(list.data.filter((e: { id: string }) => e.id === id)).toHaveLength(1);
  });

  it('bad input: invalid id, bad body, another account’s id, an inference key; nothing is created', async () => {
    const badId = await send('PUT', '/api/endpoints/Not_An_Id', acct.compute, small);
    expect(badId.status).toBe(400);
    expect((await badId.json()).error).toMatch(/^Invalid endpoint id "Not_An_Id": an id is "endpt-"/);
    const badBody = await send('PUT', '/api/endpoints/endpt-put-bad', acct.compute, { ...small, gpus: 2 });
    expect(badBody.status).toBe(400);
    const malformed = await send('PUT', '/api/endpoints/endpt-put-bad', acct.compute, '{"model":');
    expect(malformed.status).toBe(400);
    const badHw = await send('PUT', '/api/endpoints/endpt-put-bad', acct.compute, {
      ...small,
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 3 },
    });
    expect(badHw.status).toBe(400);
    expect((await send('GET', '/api/endpoints/endpt-put-bad', acct.compute)).status).toBe(404);

    expect((await send('PUT', '/api/endpoints/endpt-put-theirs', other.compute, small)).status).toBe(201);
    const theirs = await send('PUT', '/api/endpoints/endpt-put-theirs', acct.compute, { nonsense: true });
    expect(theirs.status).toBe(403);
    expect((await theirs.json()).error).toBe('Unauthorized access to dedicated endpoint');
    const patchTheirs = await send('PATCH', '/api/endpoints/endpt-put-theirs', acct.compute, {});
    expect(patchTheirs.status).toBe(403);
    expect((await send('PUT', '/api/endpoints/endpt-put-inf', acct.inference, small)).status).toBe(403);
    expect((await send('PATCH', '/api/endpoints/endpt-nope', acct.compute, {})).status).toBe(404);
  });
});

describe('routing strategy', () => {
  it('defaults to prefixAffinity; set at creation, changed by PATCH, kept by a PUT without it; a bad one is 400 and changes nothing', async () => {
    const plain = await send('POST', '/api/endpoints', acct.compute, small);
    expect(plain.status).toBe(201);
    expect((await plain.json()).routing).toEqual({ strategy: 'prefixAffinity' });

    const id = 'endpt-routing-rest';
    const created = await send('PUT', `/api/endpoints/${id}`, acct.compute, {
      ...small,
      routing: { strategy: 'leastLoad' },
    });
    expect(created.status).toBe(201);
    expect((await created.json()).routing).toEqual({ strategy: 'leastLoad' });

    const patched = await send('PATCH', `/api/endpoints/${id}`, acct.compute, {
      routing: { strategy: 'roundRobin' },
    });
    expect(patched.status).toBe(200);
    expect(await patched.json()).toMatchObject({ routing: { strategy: 'roundRobin' }, generation: 2 });
    const put = await send('PUT', `/api/endpoints/${id}`, acct.compute, small);
    expect(put.status).toBe(200);
    expect(await put.json()).toMatchObject({ routing: { strategy: 'roundRobin' }, generation: 2 });

    for (const [method, body] of [
      ['PATCH', { routing: { strategy: 'random' } }],
      ['PATCH', { routing: { strategy: 'leastLoad', weight: 2 } }],
      ['PUT', { ...small, routing: { strategy: 'random' } }],
    ] as const) {
      const r = await send(method, `/api/endpoints/${id}`, acct.compute, body);
      expect(r.status).toBe(400);
      expect((await r.json()).error).toMatch(/^Invalid request body: routing/);
    }
    const bad = await send('PATCH', `/api/endpoints/${id}`, acct.compute, {
      routing: { strategy: 'random' },
    });
    expect((await bad.json()).error).toBe(
      'Invalid request body: routing.strategy: must be "roundRobin", "leastLoad" or "prefixAffinity"',
    );
    expect(await get(id)).toMatchObject({ routing: { strategy: 'roundRobin' }, generation: 2 });
  }, 60_000);
});

describe('a failed endpoint', () => {
  it('wake is 409 with a hint; PATCH of its hardware builds it again, up to `up`', async () => {
    const res = await send('POST', '/api/endpoints', acct.compute, {
      model: 'org/mid',
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
    });
    const { id } = await res.json();
    const failed = await eventually(
      async () => {
        const e = await get(id);
        return e.status === 'failed' ? e : false;
      },
      { timeout: 30_000, description: 'failed' },
    );
    expect(failed.reason).toBe('ModelTooLarge');

    const wake = await send('POST', `/api/endpoints/${id}/wake`, acct.compute);
    expect(wake.status).toBe(409);
    expect(await wake.json()).toEqual({
      error: `Endpoint ${id} has failed (ModelTooLarge), and waking does not rebuild it: change it with PATCH /api/endpoints/${id} (hardware, maxModelLen, revision, scaling or authMode) to build it again, or delete it. GET /api/endpoints/${id}/logs shows the cause.`,
      code: 'endpoint_not_wakeable',
    });

    const badScaling = await send('PATCH', `/api/endpoints/${id}`, acct.compute, {
      scaling: { minReplicas: 3 },
    });
    expect(badScaling.status).toBe(400);
    expect((await badScaling.json()).error).toBe(
      'Invalid request body: scaling.minReplicas: must be less than or equal to scaling.maxReplicas (1)',
    );
    const model = await send('PATCH', `/api/endpoints/${id}`, acct.compute, { model: 'org/small' });
    expect(model.status).toBe(409);

    const patched = await send('PATCH', `/api/endpoints/${id}`, acct.compute, {
      hardware: { gpuType: 'nvidia-h100-80gb' },
    });
    expect(patched.status).toBe(200);
    expect(await patched.json()).toMatchObject({
      generation: 2,
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      model: 'org/mid',
    });
    const up = await eventually(
      async () => {
        const e = await get(id);
        return e.status === 'up' ? e : false;
      },
      { timeout: 30_000, description: 'up after the PATCH' },
    );
    expect(up).toMatchObject({ observedGeneration: 2, reason: expect.any(String), readyReplicas: 1 });
  }, 90_000);
});

describe('GET /api/whoami', () => {
  it('names the account and the key (prefix, scope), for every scope; 401 without a key', async () => {
    for (const scope of ['inference', 'compute', 'global'] as const) {
      const res = await send('GET', '/api/whoami', acct[scope]);
      expect(res.status).toBe(200);
      const body = await res.json();
      expect(body).toMatchObject({ object: 'whoami', account: { id: acct.id }, key: { scope } });
      expect(acct[scope].startsWith(body.key.prefix)).toBe(true);
      expect(JSON.stringify(body)).not.toContain(acct[scope]);
    }
    const none = await fetch(api.url + '/api/whoami');
    expect(none.status).toBe(401);
  });
});
