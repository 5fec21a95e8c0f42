// Chronos routes on real PostgreSQL: create / list / get / patch / delete / trigger / executions,
// each error of spec §7 (chronos_not_enabled, chronos_disabled, 402, validation_error per field)
// with its exact body, another account's ids answering 404, and bad input changing nothing.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { signIn } from '@berth/test/support/oidc';
import { sql } from '@berth/test/support/postgres';

let api: TestApi;
type Account = Awaited<ReturnType<TestApi['newAccount']>>;
let owner: Account;
let other: Account;

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });
const call = (key: string, method: string, path: string, body?: unknown) =>
  fetch(api.url + path, {
    method,
    headers: json(key),
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
const enableChronos = async (a: Account) =>
  expect((await call(a.global, 'POST', '/api/tools', { tool_id: 'chronos' })).status).toBe(200);
const credit = async (a: Account, amount: string) =>
  expect(
    (
      await api.admin(`/admin/accounts/${a.id}/credits`, {
        method: 'POST',
        body: JSON.stringify({ amount }),
        headers: { 'idempotency-key': randomUUID() },
      })
    ).status,
  ).toBe(201);

const run = {
  name: 'nightly-digest',
  schedule: '0 3 * * *',
  timezone: 'Europe/Berlin',
  steps: [
    {
      type: 'chat',
      model: 'main',
      messages: [{ role: 'user', content: 'Summarise the day' }],
      max_tokens: 64,
    },
    {
      type: 'chat',
      model: 'main',
      messages: [{ role: 'user', content: 'Shorter: {{steps.0.output}}' }],
      max_tokens: 32,
    },
  ],
};
const runCount = async () =>
  Number((await sql(api.db.url, 'SELECT count(*)::int AS n FROM chronos_runs'))[0]!.n);

beforeAll(async () => {
  api = await startTestApi({ BILLING_FLUSH_INTERVAL_MS: '200', BERTH_DEV_IDP: 'true' });
  const model = await api.admin('/admin/models/main', {
    method: 'PUT',
    body: JSON.stringify({
      kind: 'chat',
      backends: [{ baseUrl: 'http://127.0.0.1:9/v1', model: 'org/x' }],
      pricing: { inputPerMTok: '1.00', outputPerMTok: '2.00' },
    }),
  });
  expect(model.status).toBe(201);
  [owner, other] = [await api.newAccount(), await api.newAccount()];
}, 60_000);
afterAll(async () => api?.stop());

describe('Chronos must be enabled for the account', () => {
  it('403 chronos_not_enabled on every route until POST /api/tools {"tool_id": "chronos"}', async () => {
    const expected = {
      error:
        'Chronos is not enabled for this account. Enable it via POST /api/tools with tool_id = "chronos".',
      code: 'chronos_not_enabled',
    };
    for (const [method, path, body] of [
      ['POST', '/api/chronos/runs', run],
      ['GET', '/api/chronos/runs', undefined],
      ['GET', '/api/chronos/runs/chr_x', undefined],
      ['PATCH', '/api/chronos/runs/chr_x', { name: 'x' }],
      ['DELETE', '/api/chronos/runs/chr_x', undefined],
      ['POST', '/api/chronos/runs/chr_x/trigger', undefined],
      ['GET', '/api/chronos/runs/chr_x/executions', undefined],
    ] as const) {
      const res = await call(owner.inference, method, path, body);
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(await res.json()).toEqual(expected);
    }
    expect(await runCount()).toBe(0);
    await enableChronos(owner);
    await enableChronos(other);
  });
});

describe('validation_error names the field, and nothing is created', () => {
  const cases: [string, Record<string, unknown>, string, string][] = [
    ['missing name', { ...run, name: undefined }, 'name', 'Invalid request body: name: is required'],
    [
      'missing schedule',
      { ...run, schedule: undefined },
      'schedule',
      'Invalid request body: schedule: is required',
    ],
    [
      'missing timezone',
      { ...run, timezone: undefined },
      'timezone',
      'Invalid request body: timezone: is required',
    ],
    ['missing steps', { ...run, steps: undefined }, 'steps', 'Invalid request body: steps: is required'],
    ['empty name', { ...run, name: '  ' }, 'name', 'Invalid request body: name: must not be empty'],
    [
      'a 6-field schedule',
      { ...run, schedule: '0 0 3 * * *' },
      'schedule',
      'Invalid request body: schedule: must be a 5-field cron expression (minute hour day-of-month month day-of-week) or an alias such as @hourly; got 6 fields',
    ],
    [
      'an hour of 25',
      { ...run, schedule: '0 25 * * *' },
      'schedule',
      'Invalid request body: schedule: hour "25" is outside 0-23',
    ],
    [
      'a 10 KB schedule',
      { ...run, schedule: `${'1,'.repeat(5_000)}1 * * * *` },
      'schedule',
      'Invalid request body: schedule: must be at most 100 characters',
    ],
    [
      'a schedule over two lines',
      { ...run, schedule: '0 3\n* * *' },
      'schedule',
      'Invalid request body: schedule: must be on one line, without control characters',
    ],
    [
      'an offset for a timezone',
      { ...run, timezone: '+01:00' },
      'timezone',
      'Invalid request body: timezone: must be an IANA time zone name such as "Europe/Berlin" or "UTC"',
    ],
    [
      'an unknown timezone',
      { ...run, timezone: 'Europe/Atlantis' },
      'timezone',
      'Invalid request body: timezone: must be an IANA time zone name such as "Europe/Berlin" or "UTC"',
    ],
    ['no steps', { ...run, steps: [] }, 'steps', 'Invalid request body: steps: must have at least one step'],
    [
      'a step of no known type',
      { ...run, steps: [{ type: 'email' }] },
      'steps.0.type',
      'Invalid request body: steps.0.type: must be "chat" or "tool"',
    ],
    [
      'a chat step without max_tokens',
      { ...run, steps: [{ type: 'chat', model: 'main', messages: [{ role: 'user', content: 'hi' }] }] },
      'steps.0.max_tokens',
      'Invalid request body: steps.0.max_tokens: is required',
    ],
    [
      'a step using its own output',
      {
        ...run,
        steps: [
          {
            type: 'chat',
            model: 'main',
            messages: [{ role: 'user', content: 'x {{steps.0.output}}' }],
            max_tokens: 5,
          },
        ],
      },
      'steps.0.messages.0.content',
      'Invalid request body: steps.0.messages.0.content: refers to {{steps.0.output}}; a step can only use the outputs of the steps before it (the first step has no step before it)',
    ],
    [
      'a step using a later one’s output',
      {
        ...run,
        steps: [
          run.steps[0],
          {
            type: 'chat',
            model: 'main',
            messages: [{ role: 'user', content: 'x {{steps.2.output}}' }],
            max_tokens: 5,
          },
        ],
      },
      'steps.1.messages.0.content',
      'Invalid request body: steps.1.messages.0.content: refers to {{steps.2.output}}; a step can only use the outputs of the steps before it (step 1 can use {{steps.0.output}} only)',
    ],
    [
      'every missing field at once, in order',
      { steps: [] },
      'name',
      'Invalid request body: name: is required; schedule: is required; timezone: is required; steps: must have at least one step',
    ],
    [
      'every bad step at once',
      {
        ...run,
        steps: [
          { type: 'chat', model: 'main', messages: [], max_tokens: 0 },
          { type: 'tool', tool_id: 'Bad Id', input: {} },
        ],
      },
      'steps.0.messages',
      'Invalid request body: steps.0.messages: must have at least one message; steps.0.max_tokens: must be at least 1; steps.1.tool_id: must be a managed tool id (GET /api/tools)',
    ],
    [
      'every step naming something missing, at once',
      {
        ...run,
        steps: [
          { ...run.steps[0], model: 'nope' },
          { type: 'tool', tool_id: 'nope', input: {} },
        ],
      },
      'steps.0.model',
      'Invalid request body: steps.0.model: no catalog model "nope" (GET /api/models lists them; or "auto", "olympus", "olympus-auto"); steps.1.tool_id: Unknown tool "nope" (GET /api/tools lists the catalog)',
    ],
    [
      'a model not in the catalog',
      { ...run, steps: [{ ...run.steps[0], model: 'nope' }] },
      'steps.0.model',
      'Invalid request body: steps.0.model: no catalog model "nope" (GET /api/models lists them; or "auto", "olympus", "olympus-auto")',
    ],
    [
      'an unknown tool',
      { ...run, steps: [{ type: 'tool', tool_id: 'nope', input: {} }] },
      'steps.0.tool_id',
      'Invalid request body: steps.0.tool_id: Unknown tool "nope" (GET /api/tools lists the catalog)',
    ],
  ];
  it.each(cases)('%s', async (_what, body, _field, message) => {
    const res = await call(owner.global, 'POST', '/api/chronos/runs', body);
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: message, code: 'validation_error' });
    expect(await runCount()).toBe(0);
  });

  it('a body that is not JSON, and one with an unknown field', async () => {
    const bad = await fetch(api.url + '/api/chronos/runs', {
      method: 'POST',
      headers: json(owner.global),
      body: '{',
    });
    expect(bad.status).toBe(400);
    expect((await bad.json()).code).toBe('invalid_json');
    const extra = await call(owner.global, 'POST', '/api/chronos/runs', { ...run, cron: 'x' });
    expect(extra.status).toBe(400);
    expect((await extra.json()).code).toBe('validation_error');
    expect(await runCount()).toBe(0);
  });
});

describe('the routes', () => {
  let id: string;
  it('creates a run (inference key) and shows the next fire times in its zone, with offset', async () => {
    const before = Date.now();
    const res = await call(owner.inference, 'POST', '/api/chronos/runs', run);
    expect(res.status).toBe(201);
    const body = await res.json();
    id = body.id;
    expect(id).toMatch(/^chr_[A-Za-z0-9]{20}$/);
    expect(body).toMatchObject({ name: 'nightly-digest', schedule: '0 3 * * *', timezone: 'Europe/Berlin' });
    expect(body.steps).toEqual(run.steps);
    expect(body.next_fires).toHaveLength(5);
    for (const t of body.next_fires) expect(t).toMatch(/^\d{4}-\d\d-\d\dT03:00:00\+0[12]:00$/);
    expect(body.next_fire_at).toBe(body.next_fires[0]);
    const first = new Date(body.next_fire_at).getTime();
    expect(first).toBeGreaterThan(before);
    expect(first - before).toBeLessThanOrEqual(86_400_000 + 3_600_000);
    // Its first fire is pending in its row, due then.
    const [row] = await sql<{ next_fire_at: Date }>(
      api.db.url,
      'SELECT next_fire_at FROM chronos_runs WHERE id = $1',
      [id],
    );
    expect(row!.next_fire_at.getTime()).toBe(first);
  });

  it('lists (global key) and gets it', async () => {
    const list = await call(owner.global, 'GET', '/api/chronos/runs');
    expect(list.status).toBe(200);
    expect(await list.json()).toMatchObject({
      object: 'list',
      data: [{ id }],
      has_more: false,
      first_id: id,
      last_id: id,
    });
    const one = await call(owner.inference, 'GET', `/api/chronos/runs/${id}`);
    expect(one.status).toBe(200);
    expect((await one.json()).name).toBe('nightly-digest');
  });

  it('patches the schedule: the next fire moves, the old fire job goes stale', async () => {
    const res = await call(owner.global, 'PATCH', `/api/chronos/runs/${id}`, {
      schedule: '@hourly',
      timezone: 'UTC',
    });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.schedule).toBe('@hourly');
    expect(body.next_fire_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:00:00\+00:00$/);
    const [row] = await sql(api.db.url, 'SELECT next_fire_at FROM chronos_runs WHERE id = $1', [id]);
    expect(new Date(row!.next_fire_at as string).toISOString()).toBe(
      new Date(body.next_fire_at).toISOString(),
    );
    const bad = await call(owner.global, 'PATCH', `/api/chronos/runs/${id}`, { timezone: 'Nowhere/Else' });
    expect(bad.status).toBe(400);
    expect((await bad.json()).code).toBe('validation_error');
    const empty = await call(owner.global, 'PATCH', `/api/chronos/runs/${id}`, {});
    expect(empty.status).toBe(400);
    expect(await empty.json()).toEqual({
      error: 'The request body must change at least one of name, schedule, timezone, steps',
      code: 'validation_error',
    });
    expect((await (await call(owner.global, 'GET', `/api/chronos/runs/${id}`)).json()).timezone).toBe('UTC');
  });

  it('402 on a manual trigger when the balance cannot cover the run fee and the first step', async () => {
    const res = await call(owner.global, 'POST', `/api/chronos/runs/${id}/trigger`);
    expect(res.status).toBe(402);
    expect(await res.json()).toEqual({
      error: 'Insufficient balance / payment required',
      code: 'insufficient_balance',
    });
    const executions = await call(owner.global, 'GET', `/api/chronos/runs/${id}/executions`);
    expect((await executions.json()).data).toEqual([]);
  });

  it('a trigger with a balance queues an execution (202)', async () => {
    await credit(owner, '5.00');
    // The 402 just before is remembered for up to a second unless the credit's NOTIFY came first.
    let res = await call(owner.global, 'POST', `/api/chronos/runs/${id}/trigger`);
    for (let i = 0; res.status === 402 && i < 20; i++) {
      await new Promise((r) => setTimeout(r, 100));
      res = await call(owner.global, 'POST', `/api/chronos/runs/${id}/trigger`);
    }
    expect(res.status).toBe(202);
    const body = await res.json();
    expect(body).toMatchObject({ run_id: id, trigger: 'manual', scheduled_for: null });
    expect(['queued', 'running', 'failed', 'succeeded']).toContain(body.status);
    const list = await call(owner.global, 'GET', `/api/chronos/runs/${id}/executions?limit=5`);
    expect(list.status).toBe(200);
    expect((await list.json()).data.map((e: { id: string }) => e.id)).toEqual([body.id]);
    const badLimit = await call(owner.global, 'GET', `/api/chronos/runs/${id}/executions?limit=0`);
    expect(badLimit.status).toBe(400);
    expect(await badLimit.json()).toEqual({
      error: 'Invalid query: limit: must be between 1 and 100',
      code: 'validation_error',
    });
  });

  it("another account's run is 404 on every route, and stays as it was", async () => {
    for (const [method, path, body] of [
      ['GET', `/api/chronos/runs/${id}`, undefined],
      ['PATCH', `/api/chronos/runs/${id}`, { name: 'stolen' }],
      ['DELETE', `/api/chronos/runs/${id}`, undefined],
      ['POST', `/api/chronos/runs/${id}/trigger`, undefined],
      ['GET', `/api/chronos/runs/${id}/executions`, undefined],
    ] as const) {
      const res = await call(other.global, method, path, body);
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(await res.json()).toEqual({ error: `Chronos run ${id} not found`, code: 'not_found' });
    }
    expect((await (await call(other.global, 'GET', '/api/chronos/runs')).json()).data).toEqual([]);
    expect((await (await call(owner.global, 'GET', `/api/chronos/runs/${id}`)).json()).name).toBe(
      'nightly-digest',
    );
  });

  it('a dashboard session manages runs too (with its CSRF token)', async () => {
    const { jar } = await signIn(api.url, { subject: 'chronos-user', name: 'C' });
    const { csrfToken } = (await (await jar.fetch(`${api.url}/auth/session`)).json()) as {
      csrfToken: string;
    };
    const headers = { 'content-type': 'application/json', 'x-csrf-token': csrfToken };
    const enable = await jar.fetch(`${api.url}/api/tools`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ tool_id: 'chronos' }),
    });
    expect(enable.status).toBe(200);
    const created = await jar.fetch(`${api.url}/api/chronos/runs`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ ...run, name: 'from-the-dashboard' }),
    });
    expect(created.status).toBe(201);
    const sessionRun = (await created.json()) as { id: string };
    const list = await jar.fetch(`${api.url}/api/chronos/runs`);
    expect(((await list.json()) as { data: { id: string }[] }).data.map((r) => r.id)).toEqual([
      sessionRun.id,
    ]);
    // Without the CSRF token a session cannot change anything.
    const forged = await jar.fetch(`${api.url}/api/chronos/runs/${sessionRun.id}`, { method: 'DELETE' });
    expect(forged.status).toBe(403);
    expect(((await forged.json()) as { code: string }).code).toBe('csrf_failed');
    const removed = await jar.fetch(`${api.url}/api/chronos/runs/${sessionRun.id}`, {
      method: 'DELETE',
      headers,
    });
    expect(removed.status).toBe(200);
  });

  it('a compute key is refused', async () => {
    const res = await call(owner.compute, 'GET', '/api/chronos/runs');
    expect(res.status).toBe(403);
  });

  it('CHRONOS_ENABLED=false: 403 chronos_disabled everywhere, nothing deleted', async () => {
    const off = await startTestApi({ CHRONOS_ENABLED: 'false' }, api.db);
    try {
      for (const [method, path, body] of [
        ['POST', '/api/chronos/runs', run],
        ['GET', '/api/chronos/runs', undefined],
        ['GET', `/api/chronos/runs/${id}`, undefined],
        ['POST', `/api/chronos/runs/${id}/trigger`, undefined],
      ] as const) {
        const res = await fetch(off.url + path, {
          method,
          headers: json(owner.global),
          ...(body ? { body: JSON.stringify(body) } : {}),
        });
        expect(res.status, `${method} ${path}`).toBe(403);
        expect(await res.json()).toEqual({
          error: 'Chronos is turned off on this platform (CHRONOS_ENABLED=false); existing runs are kept',
          code: 'chronos_disabled',
        });
      }
    } finally {
      await off.stop();
    }
    expect(await runCount()).toBe(1);
  });

  it('deletes the run (then 404)', async () => {
    const res = await call(owner.global, 'DELETE', `/api/chronos/runs/${id}`);
    expect(res.status).toBe(200);
    expect((await res.json()).id).toBe(id);
    expect((await call(owner.global, 'GET', `/api/chronos/runs/${id}`)).status).toBe(404);
    expect((await call(owner.global, 'DELETE', `/api/chronos/runs/${id}`)).status).toBe(404);
    expect(await runCount()).toBe(0);
  });
});
