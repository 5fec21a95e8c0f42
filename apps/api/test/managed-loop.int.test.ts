// The managed tool loop against real parts: the engine simulator as the model (its scripted tool
// calls), a real MCP server (the official SDK's), the tool catalog, enablement and the wallet on
// real PostgreSQL. The model call is the loop's injected seam; here it is a plain OpenAI-style
// call to the simulator (the Elastic routes pass their own).
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEngineSim, type EngineSimHandle } from '@berth/engine-sim';
import { openDatabase, type Database } from '@berth/db';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { startMcpServer, type TestMcpServer } from '@berth/test/support/mcp-server';
import { sql } from '@berth/test/support/postgres';
import { ApiError } from '../src/platform/errors.ts';
import { toolRepository, type ToolRepository } from '../src/tools/repository.ts';
import { parseSecretsKey, sealer } from '../src/platform/sealed.ts';
import { requireTools } from '../src/tools/access.ts';
import { runManagedLoop, type CallModel, type LoopEvent, type ModelStep } from '../src/tools/loop.ts';
import { closeManagedServers, openManagedServers, walletCharger } from '../src/tools/managed.ts';

const SECRETS_KEY = 'b'.repeat(64);
const MCP_TOKEN = 'Bearer mcp-token-42';
let api: TestApi;
let sim: EngineSimHandle;
let mcp: TestMcpServer;
let db: Database;
let repo: ToolRepository;

beforeAll(async () => {
  [api, sim, mcp] = await Promise.all([
    startTestApi({
      BERTH_SECRETS_KEY: SECRETS_KEY,
      BILLING_FLUSH_INTERVAL_MS: '200',
      BILLING_LEASE_TTL_MS: '5000',
    }),
    // A context long enough that a loop that never finishes meets the wall clock, not the limit.
    startEngineSim({ model: 'sim-tools', ttftMs: 1, itlMs: 0, maxModelLen: 10_000_000 }),
    startMcpServer({ requireAuthorization: MCP_TOKEN }),
  ]);
  db = await openDatabase({ kind: 'postgres', url: api.db.url, poolSize: 2 });
  repo = toolRepository(db.prisma);
  const put = (id: string, body: object) =>
    api.admin(`/admin/tools/${id}`, {
      method: 'PUT',
      body: JSON.stringify({ description: id, url: mcp.url, headers: { Authorization: MCP_TOKEN }, ...body }),
    });
  expect((await put('toolbox', { price_per_call: '0.002', timeout_ms: 1500 })).status).toBe(201);
  expect((await put('toolbox-nokey', { price_per_call: '0.002', headers: {} })).status).toBe(201);
  expect((await put('down', { price_per_call: '0.001', url: 'http://127.0.0.1:9/mcp' })).status).toBe(201);
}, 60_000);
afterAll(async () => {
  await db?.close();
  await Promise.all([api?.stop(), sim?.close(), mcp?.close()]);
});

const callModel: CallModel = async (body, { signal }) => {
  const r = await fetch(`${sim.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, model: 'sim-tools' }),
    signal,
  });
  if (r.status !== 200) throw new Error(`model: ${r.status} ${await r.text()}`);
  const c = (await r.json()) as { model: string; usage: ModelStep['usage']; choices: ModelStep[] };
  const choice = c.choices[0]!;
  return { message: choice.message, finish_reason: choice.finish_reason, usage: c.usage, model: c.model };
};

async function paidAccount(tools: string[] = ['toolbox']) {
  const acct = await api.newAccount();
  const credit = await api.admin(`/admin/accounts/${acct.id}/credits`, {
    method: 'POST',
    headers: { 'idempotency-key': randomUUID() },
    body: JSON.stringify({ amount: '1.00' }),
  });
  expect(credit.status).toBe(201);
  for (const tool_id of tools) {
    const r = await fetch(api.url + '/api/tools', {
      method: 'POST',
      headers: { ...bearer(acct.global), 'content-type': 'application/json' },
      body: JSON.stringify({ tool_id }),
    });
    expect(r.status).toBe(200);
  }
  return acct;
}

async function run(
  accountId: string,
  prompt: string,
  options: {
    toolIds?: string[];
    toolPin?: string[];
    maxSteps?: number;
    signal?: AbortSignal;
    body?: object;
  } = {},
) {
  const tools = await requireTools(
    repo,
    { accountId, toolPin: options.toolPin ?? [] },
    options.toolIds ?? ['toolbox'],
  );
  const signal = options.signal ?? AbortSignal.timeout(30_000);
  const servers = await openManagedServers(
    tools,
    { sealer: sealer(parseSecretsKey(SECRETS_KEY)!), maxResponseBytes: 1_048_576 },
    signal,
  );
  const events: LoopEvent[] = [];
  try {
    const result = await runManagedLoop({
      body: { messages: [{ role: 'user', content: prompt }], ...options.body },
      servers,
      callModel,
      charge: walletCharger(api.billing.wallet, { accountId, keyId: 'key_test' }),
      maxSteps: options.maxSteps ?? 16,
      signal,
      onEvent: (e) => events.push(e),
    });
    return { result, events };
  } finally {
    await closeManagedServers(servers);
  }
}

async function charges(accountId: string): Promise<bigint> {
  await api.billing.wallet.flush();
  const [row] = await sql<{ total: string | null }>(
    api.db.url,
    `SELECT sum(cost)::text AS total FROM metered_usage WHERE account_id = $1 AND model LIKE 'tool:%'`,
    [accountId],
  );
  return BigInt(row?.total ?? '0');
}

describe('managed loop: model → MCP tools/call → model', () => {
  it('two tool calls, results back to the model, an answer; each call charged at the tool’s price', async () => {
    const acct = await paidAccount();
    const before = mcp.calls.length;
    const { result, events } = await run(
      acct.id,
      'Plan:\ncall weather {"city": "Paris"}\ncall add {"a": 2, "b": 3}',
    );
    expect(result.final.message.content).toBe('Tool results: weather: Sunny, 21 C in Paris; add: 5');
    expect(result.final.finish_reason).toBe('stop');
    expect(result.modelCalls).toBe(3);
    expect(result.toolCalls.map((c) => [c.server_label, c.name, c.output, c.is_error])).toEqual([
      ['toolbox', 'weather', 'Sunny, 21 C in Paris', false],
      ['toolbox', 'add', '5', false],
    ]);
    expect(events.map((e) => e.type)).toEqual([
      'tool_call',
      'tool_result',
      'tool_call',
      'tool_result',
      'content',
    ]);
    // The sealed header reached the MCP server on the calls.
    expect(mcp.calls.slice(before).map((c) => [c.name, c.args, c.authorization])).toEqual([
      ['weather', { city: 'Paris' }, MCP_TOKEN],
      ['add', { a: 2, b: 3 }, MCP_TOKEN],
    ]);
    expect(await charges(acct.id)).toBe(4000n);
  });

  it('tool failures and timeouts are results the model reads, not errors; they are not charged', async () => {
    const acct = await paidAccount();
    const { result } = await run(acct.id, 'call fail\ncall slow {"ms": 5000}\ncall add {"a": 1}');
    const outputs = result.toolCalls.map((c) => [c.name, c.is_error, c.output]);
    expect(outputs[0]).toEqual(['fail', true, 'the fail tool failed on purpose']);
    expect(outputs[1]).toEqual(['slow', true, 'Error: the tool server did not answer within 1500 ms']);
    expect(outputs[2]![0]).toBe('add'); // invalid arguments: the server's own validation error
    expect(outputs[2]![1]).toBe(true);
    expect(result.final.message.content).toMatch(
      /^Tool results: fail: the fail tool failed on purpose; slow: Error: /,
    );
    // fail and add answered (isError) → charged; the timed-out call was not.
    expect(await charges(acct.id)).toBe(4000n);
  });

  it('a server that cannot be reached is named to the model; the request still answers', async () => {
    const acct = await paidAccount(['down']);
    const { result } = await run(acct.id, 'Hello', { toolIds: ['down'] });
    expect(result.final.finish_reason).toBe('stop');
    expect(result.toolCalls).toEqual([]);
  });

  it('client-side function tools pass through untouched (the loop returns the call)', async () => {
    const acct = await paidAccount();
    const before = mcp.calls.length;
    const lookup = { type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } };
    const { result } = await run(acct.id, 'call lookup {"q": "x"}', { body: { tools: [lookup] } });
    expect(result.final.finish_reason).toBe('tool_calls');
    expect(result.final.message.tool_calls?.map((c) => [c.function.name, c.function.arguments])).toEqual([
      ['lookup', '{"q": "x"}'],
    ]);
    expect(mcp.calls.length).toBe(before);
  });

  it('the step limit makes the model answer with what it has', async () => {
    const acct = await paidAccount();
    const { result } = await run(
      acct.id,
      'call add {"a": 1, "b": 1}\ncall add {"a": 2, "b": 2}\ncall add {"a": 3, "b": 3}',
      {
        maxSteps: 2,
      },
    );
    expect(result.modelCalls).toBe(2);
    expect(result.toolCalls.map((c) => c.output)).toEqual(['2']);
    expect(result.final.message.content).toBe('Tool results: add: 2');
  });

  it('the wall clock ends a loop that never finishes', async () => {
    const acct = await paidAccount();
    const clock = new AbortController();
    const timer = setTimeout(
      () => clock.abort(new ApiError('gateway_timeout', { message: 'wall clock' })),
      1500,
    );
    const started = Date.now();
    await expect(
      run(acct.id, 'forever', { maxSteps: 10_000, signal: clock.signal, body: { tool_choice: 'required' } }),
    ).rejects.toMatchObject({ code: 'gateway_timeout', message: 'wall clock' });
    clearTimeout(timer);
    expect(Date.now() - started).toBeLessThan(5000);
  });
});

describe('managed loop: who may use which tool, and who pays', () => {
  it('a key whose pin leaves the tool out is refused with 403 naming it; so is a tool not enabled', async () => {
    const acct = await paidAccount();
    await expect(run(acct.id, 'x', { toolPin: ['olympus'] })).rejects.toMatchObject({
      status: 403,
      code: 'tool_not_allowed',
      message: `Tool "toolbox" is not allowed by this API key's tool pin`,
    });
    await expect(run(acct.id, 'x', { toolIds: ['toolbox-nokey'] })).rejects.toMatchObject({
      status: 403,
      message:
        'Tool "toolbox-nokey" is not enabled for this account; enable it with POST /api/tools {"tool_id": "toolbox-nokey"}',
    });
    await expect(run(acct.id, 'x', { toolIds: ['nope'] })).rejects.toMatchObject({
      status: 400,
      code: 'unknown_tool',
    });
  });

  it('an account without balance gets 402 at the first tool call, and the server is not called', async () => {
    const acct = await api.newAccount();
    await fetch(api.url + '/api/tools', {
      method: 'POST',
      headers: { ...bearer(acct.global), 'content-type': 'application/json' },
      body: JSON.stringify({ tool_id: 'toolbox' }),
    });
    const before = mcp.calls.length;
    await expect(run(acct.id, 'call add {"a": 1, "b": 1}')).rejects.toMatchObject({
      status: 402,
      message: 'Insufficient balance / payment required',
    });
    expect(mcp.calls.length).toBe(before);
  });
});
