// The dedicated-endpoint path end to end on the real control plane: the API provisions through the
// DedicatedEndpoint resource, the operator reconciles it on kwok GPU nodes, an engine simulator
// serves each pod on the pod's own (loopback) IP, and the official OpenAI SDK is the client.
import OpenAI from 'openai';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_VERSION, KIND } from '@berth/crds';
import type { OperatorHandle } from '@berth/operator';
import { kubeconfigPath, kubectlOk, loadKubeConfig, testNamespace } from '../cluster/env.ts';
import { eventually } from '../support/eventually.ts';
import { bearer, startTestApi, type TestApi } from '../support/api.ts';
import { servePodEngines, type PodEngines } from '../support/pod-engines.ts';
import { startFakeHub } from '../../operator/test/support/fake-hub.ts';
import { installCrd, start, testConfig } from '../../operator/test/support/harness.ts';

let ns: Awaited<ReturnType<typeof testNamespace>>;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let op: OperatorHandle;
let engines: PodEngines;
let api: TestApi;
let acct: Awaited<ReturnType<TestApi['newAccount']>>;
let other: Awaited<ReturnType<TestApi['newAccount']>>;

beforeAll(async () => {
  await installCrd();
  ns = await testNamespace('e2e-proxy');
  hub = await startFakeHub();
  op = await start(testConfig(ns.name, hub.url, { leaderElection: false, provisioningTimeoutSeconds: 120 }));
  engines = await servePodEngines(loadKubeConfig(), ns.name);
  api = await startTestApi({
    KUBECONFIG: kubeconfigPath(),
    BERTH_NAMESPACE: ns.name,
    PUBLIC_RATE_LIMIT_PER_CLIENT: '4',
    WAKE_HOLD_TIMEOUT_MS: '90000',
    USAGE_FLUSH_INTERVAL_MS: '60000',
  });
  acct = await api.newAccount();
  other = await api.newAccount();
}, 180_000);

afterAll(async () => {
  // Terminate through the API while the operator still runs, so finalizers are released.
  if (api && acct) {
    const list = await (
      await fetch(api.url + '/api/endpoints', { headers: bearer(acct.global) })
    )
      .json()
      .catch(() => ({ data: [] }));
    for (const e of list.data ?? [])
      await fetch(`${api.url}/api/endpoints/${e.id}`, { method: 'DELETE', headers: bearer(acct.global) });
  }
  await kubectlOk([
    'delete',
    'dedicatedendpoints',
    '--all',
    '-n',
    ns.name,
    '--wait=true',
    '--timeout=60s',
  ]).catch(() => {});
  await api?.stop();
  await engines?.close();
  await op?.stop();
  await hub?.close();
  await ns?.remove();
}, 120_000);

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });

async function provision(body: Record<string, unknown>, key = acct.compute) {
  const res = await fetch(api.url + '/api/endpoints', {
    method: 'POST',
    headers: json(key),
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

async function getEndpoint(id: string, key = acct.compute) {
  return (await fetch(`${api.url}/api/endpoints/${id}`, { headers: bearer(key) })).json();
}

async function waitStatus(id: string, status: string, timeout = 60_000) {
  return eventually(
    async () => {
      const e = await getEndpoint(id);
      expect(e.status).toBe(status);
      return e;
    },
    { timeout },
  );
}

function sdk(id: string, apiKey: string, opts: Partial<ConstructorParameters<typeof OpenAI>[0]> = {}) {
  return new OpenAI({ baseURL: `${api.url}/api/d/${id}`, apiKey, maxRetries: 0, ...opts });
}

/** `kubectl apply` of a DedicatedEndpoint owned by the test account (the other way in). */
async function kubectlApplyEndpoint(id: string, spec: Record<string, unknown>) {
  const manifest = {
    apiVersion: API_VERSION,
    kind: KIND,
    metadata: { name: id, namespace: ns.name },
    spec: { account: acct.id, model: { id: 'org/small' }, ...spec },
  };
  await kubectlOk(['apply', '-f', '-'], { input: JSON.stringify(manifest) });
}

let small: string;

describe('provisioning through the API', () => {
  it('POST /api/endpoints creates an endpoint that goes building → up', async () => {
    const { status, body } = await provision({
      name: 'my-small',
      model: 'org/small',
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 900 },
    });
    expect(status).toBe(201);
    expect(body).toMatchObject({
      id: expect.stringMatching(/^endpt-[a-z2-7]{14}$/),
      name: 'my-small',
      model: 'org/small',
      status: 'building',
      label: 'PROVISIONING',
      authMode: 'Private',
      baseUrl: `${api.url}/api/d/${body.id}`,
    });
    small = body.id;
    const cr = JSON.parse(await kubectlOk(['get', 'dedicatedendpoint', small, '-n', ns.name, '-o', 'json']));
    expect(cr.spec).toMatchObject({
      account: acct.id,
      model: { id: 'org/small' },
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
    });
    const up = await waitStatus(small, 'up', 90_000);
    expect(up).toMatchObject({ label: 'ONLINE', readyReplicas: 1 });
  });

  it('GET /api/hardware lists the catalog', async () => {
    const res = await fetch(api.url + '/api/hardware', { headers: bearer(acct.inference) });
    const { data } = await res.json();
    expect(data.find((t: { id: string }) => t.id === 'nvidia-h100-80gb')).toEqual({
      id: 'nvidia-h100-80gb',
      gpuType: expect.any(String),
      gpuMemoryGiB: 80,
      allowedGpuCounts: [1, 2, 4, 8],
      available: true,
    });
  });

  it('refuses bad hardware and bad bodies with 400, creating nothing', async () => {
    const before = (await (await fetch(api.url + '/api/endpoints', { headers: bearer(acct.global) })).json())
      .data.length;
    const cases: [Record<string, unknown>, string][] = [
      [
        { model: 'org/small', hardware: { gpuType: 'tpu-v9', gpuCount: 1 } },
        'Invalid request body: hardware.gpuType: unknown GPU type "tpu-v9"',
      ],
      [
        { model: 'org/small', hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 3 } },
        'Invalid request body: hardware.gpuCount: gpuCount 3 is not offered for nvidia-h100-80gb; one of: 1, 2, 4, 8',
      ],
      [
        { model: 'org/small' },
        'Invalid request body: hardware: Invalid input: expected object, received undefined',
      ],
      [
        {
          model: 'org/small',
          hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
          scaling: { minReplicas: 2, maxReplicas: 1 },
        },
        'Invalid request body: scaling.minReplicas: must be less than or equal to scaling.maxReplicas',
      ],
      [
        { model: 'org/small', hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 }, authMode: 'Open' },
        'Invalid request body: authMode: must be "Private" or "Public"',
      ],
    ];
    for (const [body, message] of cases) {
      const r = await provision(body);
      expect(r.status, message).toBe(400);
      expect(r.body.error).toContain(message);
    }
    const inference = await provision(
      { model: 'org/small', hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 } },
      acct.inference,
    );
    expect(inference.status).toBe(403);
    const after = (await (await fetch(api.url + '/api/endpoints', { headers: bearer(acct.global) })).json())
      .data.length;
    expect(after).toBe(before);
  });

  it("another account's endpoint: 403 on management routes, unknown ids 404", async () => {
    for (const [method, path] of [
      ['GET', ''],
      ['DELETE', ''],
      ['POST', '/wake'],
      ['GET', '/logs'],
    ] as const) {
      const res = await fetch(`${api.url}/api/endpoints/${small}${path}`, {
        method,
        headers: bearer(other.global),
      });
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(await res.json()).toEqual({
        error: 'Unauthorized access to dedicated endpoint',
        code: 'endpoint_not_owned',
      });
    }
    const unknown = await fetch(`${api.url}/api/endpoints/endpt-doesnotexist`, {
      headers: bearer(acct.global),
    });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({
      error: 'Dedicated endpoint endpt-doesnotexist not found',
      code: 'not_found',
    });
    expect((await getEndpoint(small)).status).toBe('up');
    const listed = await (await fetch(api.url + '/api/endpoints', { headers: bearer(other.global) })).json();
    expect(listed.data).toEqual([]);
  });
});

describe('calling a dedicated endpoint with the OpenAI SDK', () => {
  it('non-streaming chat completion', async () => {
    const client = sdk(small, acct.inference);
    const r = await client.chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'Hello there' }],
      seed: 7,
    });
    expect(r.object).toBe('chat.completion');
    expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(r.usage).toMatchObject({ prompt_tokens: expect.any(Number), completion_tokens: 16 });
    const again = await client.chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'Hello there' }],
      seed: 7,
    });
    expect(again.choices[0]!.message.content).toBe(r.choices[0]!.message.content);
  });

  it('streaming chat completion: chunks as they come, no usage chunk unless asked', async () => {
    const client = sdk(small, acct.global);
    const stream = await client.chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'Stream it' }],
      stream: true,
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    expect(chunks.every((c) => c.choices.length === 1)).toBe(true);
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('stop');
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);

    const withUsage = await client.chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'Stream it' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage;
    for await (const c of withUsage) if (c.usage) usage = c.usage;
    expect(usage).toMatchObject({ completion_tokens: 16 });
  });

  it('the raw stream is SSE ending with data: [DONE] and a blank line', async () => {
    const res = await fetch(`${api.url}/api/d/${small}/chat/completions`, {
      method: 'POST',
      headers: json(acct.inference),
      body: JSON.stringify({ model: 'org/small', messages: [{ role: 'user', content: 'x' }], stream: true }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await res.text();
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    for (const event of text.split('\n\n').filter(Boolean)) expect(event).toMatch(/^data: /);
    expect(text).not.toContain('"usage":{');
  });

  it('completions and models on the same base', async () => {
    const client = sdk(small, acct.inference);
    const c = await client.completions.create({
      model: 'org/small',
      prompt: 'Once upon a time',
      max_tokens: 5,
    });
    expect(c.usage?.completion_tokens).toBe(5);
    const models = [];
    for await (const m of client.models.list()) models.push(m.id);
    expect(models).toEqual(['org/small']);
  });

  it('engine errors come back in the dual shape with the engine’s message', async () => {
    const res = await fetch(`${api.url}/api/d/${small}/chat/completions`, {
      method: 'POST',
      headers: json(acct.inference),
      body: JSON.stringify({ model: 'not-this-model', messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(res.status).toBe(404);
    const body = await res.json();
    expect(body.error).toMatchObject({
      type: 'invalid_request_error',
      message: 'The model `not-this-model` does not exist.',
    });
    expect(body.message).toBe(body.error.message);
  });

  it('auth errors: missing key 401, wrong account 403 Forbidden: Access denied., compute key 403, unknown id 404', async () => {
    const none = await fetch(`${api.url}/api/d/${small}/chat/completions`, {
      method: 'POST',
      body: '{}',
      headers: { 'content-type': 'application/json' },
    });
    expect(none.status).toBe(401);
    expect((await none.json()).error.message).toBe('Missing or invalid Authorization header');

    const wrong = await sdk(small, other.inference)
      .chat.completions.create({ model: 'org/small', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(wrong).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect((wrong as Error).message).toContain('Forbidden: Access denied.');

    const compute = await sdk(small, acct.compute)
      .chat.completions.create({ model: 'org/small', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(compute).toBeInstanceOf(OpenAI.PermissionDeniedError);

    const bad = await sdk(small, 'svc_live_' + 'z'.repeat(33))
      .chat.completions.create({ model: 'org/small', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.AuthenticationError);

    const unknown = await sdk('endpt-nosuchthing', acct.inference)
      .chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
    expect((unknown as Error).message).toContain('Dedicated endpoint endpt-nosuchthing not found');
  });

  it('a key revoked mid-stream ends the stream with 401 Invalid API key as an SSE error frame', async () => {
    const created = await (
      await fetch(api.url + '/api/keys', {
        method: 'POST',
        headers: json(acct.global),
        body: JSON.stringify({ name: 'doomed', scope: 'inference' }),
      })
    ).json();
    const stream = await sdk(small, created.value).chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'a long story' }],
      stream: true,
      max_tokens: 4000,
      // vLLM's extension: keep generating to max_tokens
      ...({ ignore_eos: true } as object),
    });
    let received = 0;
    const err = await (async () => {
      for await (const _ of stream) {
        if (++received === 3) {
          const del = await fetch(`${api.url}/api/keys/${created.id}`, {
            method: 'DELETE',
            headers: bearer(acct.global),
          });
          expect(del.status).toBe(200);
        }
      }
    })().catch((e: unknown) => e);
    expect(received).toBeGreaterThanOrEqual(3);
    expect(received).toBeLessThan(4000);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as Error).message).toContain('Invalid API key');
  });

  it('a client that goes away aborts the upstream request', async () => {
    const [server] = engines.forEndpoint(small);
    expect(server).toBeDefined();
    const controller = new AbortController();
    const res = await fetch(`${api.url}/api/d/${small}/chat/completions`, {
      method: 'POST',
      headers: json(acct.inference),
      body: JSON.stringify({
        model: 'org/small',
        messages: [{ role: 'user', content: 'x' }],
        stream: true,
        max_tokens: 4000,
        ignore_eos: true,
      }),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    const running = () => server!.metrics.running;
    expect(running()).toBeGreaterThanOrEqual(1);
    controller.abort();
    await eventually(() => expect(running()).toBe(0), { timeout: 5000 });
  });

  it('records usage per endpoint and account, streaming included', async () => {
    await api.usage!.flush();
    const c = new pg.Client({ connectionString: api.db.url });
    await c.connect();
    const { rows } = await c.query(
      'SELECT account_id, sum(requests)::int AS requests, sum(completion_tokens)::int AS completion FROM endpoint_usage WHERE endpoint_id = $1 GROUP BY account_id',
      [small],
    );
    await c.end();
    expect(rows).toHaveLength(1);
    expect(rows[0].account_id).toBe(acct.id);
    // 2 non-streaming + 2 streaming + 1 raw stream (16 tokens each) + 1 completion (5 tokens), at least.
    expect(rows[0].requests).toBeGreaterThanOrEqual(6);
    expect(rows[0].completion).toBeGreaterThanOrEqual(5 * 16 + 5);
  });
});

describe('endpoints created with kubectl', () => {
  it('are served like the API’s own; Public needs no key and is rate-limited per client', async () => {
    const id = 'endpt-kubectl-public';
    await kubectlApplyEndpoint(id, {
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      authMode: 'Public',
    });
    await waitStatus(id, 'up', 90_000);
    const listed = await (await fetch(api.url + '/api/endpoints', { headers: bearer(acct.global) })).json();
    expect(listed.data.map((e: { id: string }) => e.id)).toContain(id);

    const call = () =>
      fetch(`${api.url}/api/d/${id}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'org/small', messages: [{ role: 'user', content: 'hi' }] }),
      });
    const statuses = [];
    let limited: Response | undefined;
    for (let i = 0; i < 6; i++) {
      const r = await call();
      statuses.push(r.status);
      if (r.status === 429) limited = r;
      else await r.arrayBuffer();
    }
    expect(statuses.slice(0, 4)).toEqual([200, 200, 200, 200]);
    expect(statuses[4]).toBe(429);
    expect(limited!.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(limited!.headers.get('x-ratelimit-limit-requests')).toBe('4');
    expect(limited!.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    const body = await limited!.json();
    expect(body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limited' });
  });
});

describe('phases seen by callers', () => {
  it('building: 503 endpoint_building with Retry-After', async () => {
    const id = 'endpt-slow-build';
    await kubectlApplyEndpoint(id, {
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      engine: { podAnnotations: { 'sim.berth.dev/ready-after': '1h' } },
    });
    await eventually(async () => expect(await getEndpoint(id)).toMatchObject({ status: 'building' }), {
      timeout: 20_000,
    });
    const res = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: json(acct.inference),
      body: JSON.stringify({ model: 'org/small', messages: [] }),
    });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('30');
    expect((await res.json()).error).toMatchObject({ code: 'endpoint_building', type: 'api_error' });
  });

  it('failed: 424 with the reason, and the logs show the cause', async () => {
    const { body } = await provision({
      model: 'org/huge',
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
    });
    const failed = await waitStatus(body.id, 'failed', 60_000);
    expect(failed).toMatchObject({ label: 'FAILED', reason: 'ModelTooLarge' });
    const err = await sdk(body.id, acct.inference)
      .chat.completions.create({ model: 'org/huge', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(424);
    expect((err as Error).message).toContain('ModelTooLarge');
    const logs = await (
      await fetch(`${api.url}/api/endpoints/${body.id}/logs`, { headers: bearer(acct.compute) })
    ).text();
    expect(logs).toContain('phase: failed (ModelTooLarge)');
    expect(logs).toContain(failed.message.split('\n')[0]);
  });
});

describe('scale to zero and wake on request', () => {
  it('hibernates when idle; a burst of held requests wakes it exactly once and all are answered', async () => {
    const { body } = await provision({
      model: 'org/small',
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
    });
    const id = body.id;
    await waitStatus(id, 'up', 90_000);
    const slept = await waitStatus(id, 'hibernated', 90_000);
    expect(slept.label).toBe('SLEEPING');
    // The phase turns as the operator scales to zero; the replica count follows the pod's exit.
    await eventually(async () => expect((await getEndpoint(id)).replicas).toBe(0), { timeout: 30_000 });
    await eventually(() => expect(api.runtime!.backends.addresses(id)).toEqual([]), { timeout: 30_000 });

    // Opting out of the hold: 503 at once (it still asks for a wake, which the burst below reuses).
    const quick = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: { ...json(acct.inference), 'x-berth-hold': 'false' },
      body: JSON.stringify({ model: 'org/small', messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(quick.status).toBe(503);
    expect(quick.headers.get('retry-after')).toBe('10');
    expect((await quick.json()).error.code).toBe('endpoint_waking');

    const wakesBefore = api.upstream!.wakesSignalled;
    const client = sdk(id, acct.inference, { timeout: 120_000 });
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        client.chat.completions.create({
          model: 'org/small',
          messages: [{ role: 'user', content: `wake ${i}` }],
        }),
      ),
    );
    expect(answers.every((a) => a.choices[0]!.message.content!.length > 0)).toBe(true);
    expect(api.upstream!.wakesSignalled - wakesBefore).toBeLessThanOrEqual(1);
    const events = JSON.parse(
      await kubectlOk([
        'get',
        'events',
        '-n',
        ns.name,
        '--field-selector',
        `involvedObject.name=${id}`,
        '-o',
        'json',
      ]),
    ) as { items: { reason: string; count?: number }[] };
    const waking = events.items.filter((e) => /wak/i.test(e.reason));
    expect(waking.reduce((n, e) => n + (e.count ?? 1), 0)).toBe(1);
    expect((await getEndpoint(id)).status).toBe('up');
  });
});

describe('activity', () => {
  it('a stream longer than the idle timeout keeps the endpoint up and is never cut', async () => {
    const id = 'endpt-long-stream';
    await kubectlApplyEndpoint(id, {
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
      // 220 tokens at 100 ms: a 22 s stream against a 15 s idle timeout.
      engine: { env: [{ name: 'SIM_ITL_MS', value: '100' }] },
    });
    const up = await waitStatus(id, 'up', 90_000);
    const stream = await sdk(id, acct.inference, { timeout: 120_000 }).chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'keep going' }],
      stream: true,
      max_tokens: 220,
      ...({ ignore_eos: true } as object),
    });
    let tokens = 0;
    let finish: string | null | undefined;
    for await (const c of stream) {
      if (c.choices[0]?.delta.content) tokens++;
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect(tokens).toBe(220);
    expect(finish).toBe('length');
    const after = await getEndpoint(id);
    expect(after.status).toBe('up');
    expect(after.lastTransitionTime).toBe(up.lastTransitionTime);
  }, 150_000);
});

describe('gated models', () => {
  it('a hub token given at provisioning is checked, stored in a Secret the endpoint owns, never shown', async () => {
    const good = await provision({
      model: 'org/gated',
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      hubToken: 'hf_good',
    });
    expect(good.status).toBe(201);
    expect(JSON.stringify(good.body)).not.toContain('hf_good');
    const id = good.body.id;
    const secret = JSON.parse(
      await kubectlOk(['get', 'secret', `${id}-hub-token`, '-n', ns.name, '-o', 'json']),
    );
    expect(Buffer.from(secret.data.token, 'base64').toString()).toBe('hf_good');
    expect(secret.metadata.ownerReferences).toEqual([expect.objectContaining({ kind: KIND, name: id })]);
    const cr = JSON.parse(await kubectlOk(['get', 'dedicatedendpoint', id, '-n', ns.name, '-o', 'json']));
    expect(cr.spec.model.hubTokenSecretRef).toEqual({ name: `${id}-hub-token`, key: 'token' });
    const up = await waitStatus(id, 'up', 90_000);
    expect(JSON.stringify(up)).not.toContain('hf_good');

    const wrong = await provision({
      model: 'org/gated',
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      hubToken: 'hf_wrong',
    });
    expect(await waitStatus(wrong.body.id, 'failed', 60_000)).toMatchObject({ reason: 'HubTokenInvalid' });
    const none = await provision({
      model: 'org/gated',
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
    });
    expect(await waitStatus(none.body.id, 'failed', 60_000)).toMatchObject({ reason: 'GatedModelNoToken' });

    // Terminating the endpoint removes its token.
    expect(
      (await fetch(`${api.url}/api/endpoints/${id}`, { method: 'DELETE', headers: bearer(acct.compute) }))
        .status,
    ).toBe(200);
    await eventually(
      async () => {
        const r = await kubectlOk([
          'get',
          'secret',
          '-n',
          ns.name,
          '-l',
          `berth.dev/endpoint=${id}`,
          '-o',
          'name',
        ]);
        expect(r.trim()).toBe('');
      },
      { timeout: 60_000 },
    );
  }, 200_000);
});
