// Chronos steps on `auto` choose as a live Olympus request with the same messages does: the
// account's policy, its routes by meaning (one embedding call to a catalog embedding model, an
// engine-simulator pool whose bag-of-words embeddings make texts that share words close), the
// models' live state. Real PostgreSQL, pg-boss, real wallet, simulator pools as catalog models. A
// scheduled step whose prompt matches a route runs on the route's model and its record says so
// (`olympus: {model, reason: "route:<name>"}`); an unrelated one takes the objective's choice; a
// manual trigger's check and its execution choose once; a policy that allows no model that fits
// fails the step with Olympus's message, charging the run fee only; the embedding calls are not
// charged.
import { randomUUID } from 'node:crypto';
import { startEngineSim } from '@berth/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { sql } from '@berth/test/support/postgres';

type Sim = Awaited<ReturnType<typeof startEngineSim>>;
let api: TestApi;
let cheap: Sim;
let coder: Sim;
let lawyer: Sim;
let embedder: Sim;

const FEE = 10_000n; // CHRONOS_RUN_FEE 0.010 in micro-units

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });
const call = (key: string, method: string, path: string, body?: unknown) =>
  fetch(api.url + path, {
    method,
    headers: json(key),
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
const put = (name: string, body: unknown) =>
  api.admin(`/admin/models/${encodeURIComponent(name)}`, { method: 'PUT', body: JSON.stringify(body) });
const external = (url: string, model: string) => ({ baseUrl: url + '/v1', model });
const micro = (s: string) => BigInt(s.replace('.', ''));

interface StepView {
  index: number;
  type: string;
  status: string;
  model?: string;
  olympus?: { model: string; reason: string };
  output: string | null;
  error: string | null;
  cost: string;
}
interface Execution {
  id: string;
  status: string;
  reason: string | null;
  cost: string;
  trigger: string;
  steps: StepView[];
}

const ROUTES = [
  {
    name: 'code',
    model: 'coder',
    examples: [
      'Write a Python function that sorts a list of numbers',
      'Fix the bug in this JavaScript code that throws a TypeError',
      'Refactor this Java class to use an interface',
    ],
  },
  {
    name: 'legal',
    model: 'lawyer',
    examples: [
      'Review this contract clause for liability and indemnity',
      'Is this lease agreement enforceable by the landlord',
      'Explain my rights as a tenant under the rental contract',
    ],
  },
];

beforeAll(async () => {
  [cheap, coder, lawyer, embedder] = await Promise.all([
    startEngineSim({ model: 'org/cheap', ttftMs: 0, itlMs: 0, outputTokens: 4 }),
    startEngineSim({ model: 'org/coder', ttftMs: 0, itlMs: 0, outputTokens: 4 }),
    startEngineSim({ model: 'org/lawyer', ttftMs: 0, itlMs: 0, outputTokens: 4 }),
    startEngineSim({ model: 'org/embed', ttftMs: 0 }),
  ]);
  api = await startTestApi({
    BILLING_FLUSH_INTERVAL_MS: '200',
    CHRONOS_RUN_FEE: '0.010',
    OLYMPUS_ROUTE_TIMEOUT_MS: '2000',
  });
  const chat: [string, Sim, string, number][] = [
    ['cheap', cheap, '0.10', 32_768],
    ['coder', coder, '1.00', 32_768],
    ['lawyer', lawyer, '2.00', 32_768],
    // Too small a context for any step below (and the dearest): only a policy that allows it alone
    // leaves Olympus without a model.
    ['tiny', cheap, '3.00', 16],
  ];
  for (const [name, sim, price, contextLength] of chat)
    expect(
      (
        await put(name, {
          kind: 'chat',
          backends: [external(sim.url, name === 'tiny' ? 'org/cheap' : `org/${name}`)],
          pricing: { inputPerMTok: price, outputPerMTok: price },
          contextLength,
        })
      ).status,
    ).toBe(201);
  expect(
    (
      await put('embedder', {
        kind: 'embedding',
        backends: [external(embedder.url, 'org/embed')],
        pricing: { inputPerMTok: '0.01', outputPerMTok: '0' },
        contextLength: 8192,
      })
    ).status,
  ).toBe(201);
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await Promise.all([cheap, coder, lawyer, embedder].map((s) => s?.close()));
});

/** An account with Chronos and Olympus enabled, 5.00 of credit and this Olympus policy. */
async function account(policy: object) {
  const acct = await api.newAccount();
  for (const tool_id of ['chronos', 'olympus'])
    expect((await call(acct.global, 'POST', '/api/tools', { tool_id })).status).toBe(200);
  const credit = await api.admin(`/admin/accounts/${acct.id}/credits`, {
    method: 'POST',
    headers: { 'idempotency-key': randomUUID() },
    body: JSON.stringify({ amount: '5.00' }),
  });
  expect(credit.status).toBe(201);
  const set = await call(acct.global, 'PUT', '/api/olympus/policy', policy);
  expect(set.status, await set.clone().text()).toBe(200);
  return acct;
}

/** Waits until the policy's examples are embedded (PUT starts it in the background). */
async function routesReady(key: string) {
  await eventually(
    async () => {
      const r = await call(key, 'POST', '/api/olympus/route', {
        messages: [{ role: 'user', content: 'warm up' }],
      });
      return ((await r.json()) as { routing: { outcome: string } }).routing.outcome !== 'embedding_timeout';
    },
    { timeout: 20_000, interval: 100, description: 'route examples embedded' },
  );
}

/** Embedding requests the simulator has answered (its vLLM metrics). */
async function embeddingCalls(): Promise<number> {
  const text = await (await fetch(embedder.url + '/metrics')).text();
  let n = 0;
  for (const line of text.split('\n'))
    if (line.startsWith('vllm:request_success_total{')) n += Number(line.split(' ').at(-1));
  return n;
}

const chatStep = (content: string, max_tokens = 4, model = 'auto') => ({
  type: 'chat',
  model,
  messages: [{ role: 'user', content }],
  max_tokens,
});

async function createRun(key: string, steps: object[]): Promise<{ id: string }> {
  const r = await call(key, 'POST', '/api/chronos/runs', {
    name: 'olympus-run',
    schedule: '0 3 * * *',
    timezone: 'Europe/Berlin',
    steps,
  });
  expect(r.status, await r.clone().text()).toBe(201);
  return r.json();
}

/** Moves a run's pending fire to now (its row is its pending fire): the next 5 s look fires it. */
async function fireNow(runId: string): Promise<void> {
  const rows = await sql(
    api.db.url,
    `UPDATE chronos_runs SET next_fire_at = date_trunc('second', now()) WHERE id = $1 RETURNING id`,
    [runId],
  );
  expect(rows).toHaveLength(1);
}

async function finished(key: string, runId: string): Promise<Execution> {
  let e: Execution | undefined;
  await eventually(
    async () => {
      const r = await call(key, 'GET', `/api/chronos/runs/${runId}/executions`);
      e = ((await r.json()) as { data: Execution[] }).data[0];
      return e?.status === 'succeeded' || e?.status === 'failed';
    },
    { timeout: 30_000, interval: 200, description: 'execution finished' },
  );
  return e!;
}

const balance = async (key: string) =>
  micro(((await (await call(key, 'GET', '/api/billing/balance')).json()) as { balance: string }).balance);

/** The account's usage by model, once the ledger has the execution's whole cost. */
async function charged(key: string, before: bigint, cost: bigint): Promise<Record<string, string>> {
  await eventually(async () => before - (await balance(key)) === cost, {
    timeout: 10_000,
    interval: 200,
    description: 'the execution charged',
  });
  const usage = (await (await call(key, 'GET', '/api/billing/usage')).json()) as {
    data: { model: string; cost: string }[];
  };
  return Object.fromEntries(usage.data.map((u) => [u.model, u.cost]));
}

describe('Chronos steps on auto choose as a live Olympus request', () => {
  it('a scheduled step whose prompt matches a route runs on the route’s model; the record says route:<name>', async () => {
    const acct = await account({ routes: ROUTES });
    await routesReady(acct.inference);
    const prompt = 'Write a Python function that reverses a string';
    // What a live request with the same messages gets (the dry run: the same choice, the same reason).
    const live = await call(acct.inference, 'POST', '/api/olympus/route', {
      messages: [{ role: 'user', content: prompt }],
      max_tokens: 4,
    });
    expect(live.headers.get('x-berth-olympus-reason')).toBe('route:code');

    const run = await createRun(acct.inference, [chatStep(prompt)]);
    const before = await balance(acct.global);
    const embeddings = await embeddingCalls();
    await fireNow(run.id);
    const e = await finished(acct.global, run.id);
    expect(e.status, e.reason ?? '').toBe('succeeded');
    expect(e.trigger).toBe('schedule');
    expect(e.steps).toHaveLength(1);
    expect(e.steps[0]).toMatchObject({
      type: 'chat',
      status: 'succeeded',
      model: 'coder',
      olympus: { model: 'coder', reason: 'route:code' },
      error: null,
    });
    expect(e.steps[0]!.output).toBeTruthy();
    // One embedding call for the step's choice (the admission reserved for that same choice).
    expect(await embeddingCalls()).toBe(embeddings + 1);
    // The fee and the route model's tokens; the embedding call is not charged.
    expect(micro(e.cost)).toBe(FEE + micro(e.steps[0]!.cost));
    expect(micro(e.steps[0]!.cost)).toBeGreaterThan(0n);
    expect(await charged(acct.global, before, micro(e.cost))).toEqual({
      chronos: '0.010000',
      coder: e.steps[0]!.cost,
    });
  });

  it('an unrelated prompt falls back to the objective’s choice; each step chooses for its own prompt (olympus and olympus-auto as auto)', async () => {
    const acct = await account({ routes: ROUTES });
    await routesReady(acct.inference);
    const run = await createRun(acct.inference, [
      chatStep('What a lovely sunny day for a walk in the park'),
      chatStep('Review this contract clause for liability', 4, 'olympus-auto'),
    ]);
    const embeddings = await embeddingCalls();
    await fireNow(run.id);
    const e = await finished(acct.global, run.id);
    expect(e.status, e.reason ?? '').toBe('succeeded');
    expect(e.steps.map((s) => [s.model, s.olympus])).toEqual([
      ['cheap', { model: 'cheap', reason: 'cheapest' }],
      ['lawyer', { model: 'lawyer', reason: 'route:legal' }],
    ]);
    expect(await embeddingCalls()).toBe(embeddings + 2);

    // Without routes, the objective decides (quality: the policy's allowed_models, best first).
    const best = await account({ objective: 'quality', allowed_models: ['lawyer', 'cheap'] });
    const plain = await createRun(best.inference, [chatStep('Write a Python function', 4, 'olympus')]);
    await fireNow(plain.id);
    const q = await finished(best.global, plain.id);
    expect(q.status, q.reason ?? '').toBe('succeeded');
    expect(q.steps[0]).toMatchObject({ model: 'lawyer', olympus: { model: 'lawyer', reason: 'best' } });
  });

  it('a manual trigger chooses once: its balance check and the execution use the same choice', async () => {
    const acct = await account({ routes: ROUTES });
    await routesReady(acct.inference);
    const run = await createRun(acct.inference, [
      chatStep('Is this lease agreement enforceable by the landlord'),
    ]);
    const embeddings = await embeddingCalls();
    const trigger = await call(acct.global, 'POST', `/api/chronos/runs/${run.id}/trigger`);
    expect(trigger.status).toBe(202);
    const e = await finished(acct.global, run.id);
    expect(e.status, e.reason ?? '').toBe('succeeded');
    expect(e.trigger).toBe('manual');
    expect(e.steps[0]).toMatchObject({
      model: 'lawyer',
      olympus: { model: 'lawyer', reason: 'route:legal' },
    });
    // One embedding call in all: the trigger's choice is the one the step ran on.
    expect(await embeddingCalls()).toBe(embeddings + 1);
  });

  it('a policy that allows no model that fits fails the step with Olympus’s message; nothing is charged', async () => {
    const acct = await account({ allowed_models: ['tiny'] });
    const run = await createRun(acct.inference, [
      chatStep('Summarize the news of the day', 64),
      chatStep('never runs'),
    ]);
    const before = await balance(acct.global);
    await fireNow(run.id);
    const e = await finished(acct.global, run.id);
    const message =
      /^Olympus found no catalog model for this request: it needs a chat model with a context of at least \d+ tokens, among the policy's allowed_models \(tiny\)$/;
    expect(e.status).toBe('failed');
    expect(e.reason).toMatch(/^Step 0 \(chat\) failed: Olympus found no catalog model/);
    const notCharged = ' (no step reached a model or tool, so the run fee was not charged)';
    expect(e.reason!.endsWith(notCharged)).toBe(true);
    expect(e.reason!.slice('Step 0 (chat) failed: '.length, -notCharged.length)).toMatch(message);
    expect(e.steps).toHaveLength(1);
    expect(e.steps[0]).toMatchObject({ status: 'failed', output: null, cost: '0.000000' });
    expect(e.steps[0]!.error).toMatch(message);
    expect(e.steps[0]).not.toHaveProperty('model');
    expect(e.steps[0]).not.toHaveProperty('olympus');
    // The run fee only once a step reached a model or tool: no model was called, nothing is charged.
    expect(e.cost).toBe('0.000000');
    expect(await charged(acct.global, before, 0n)).toEqual({});
  });

  it('Olympus turned off for the account after the run was saved: the step fails with olympus_not_enabled’s message', async () => {
    const acct = await account({ routes: ROUTES });
    const run = await createRun(acct.inference, [chatStep('Write a Python function')]);
    expect((await call(acct.global, 'DELETE', '/api/tools/olympus')).status).toBe(200);
    const embeddings = await embeddingCalls();
    await fireNow(run.id);
    const e = await finished(acct.global, run.id);
    expect(e.status).toBe('failed');
    expect(e.steps[0]).toMatchObject({
      status: 'failed',
      error:
        'Olympus is not enabled for this API key. Enable it via POST /api/tools with tool_id = "olympus", or adjust the key\'s tool pin.',
      cost: '0.000000',
    });
    expect(e.steps[0]).not.toHaveProperty('olympus');
    expect(e.cost).toBe('0.000000'); // no model was called: no run fee
    // Refused before any route was matched.
    expect(await embeddingCalls()).toBe(embeddings);
  });
});
