// Managed tools on the Elastic routes, end to end with the official OpenAI SDK: an engine-simulator
// pool in the catalog (its scripted tool calls), a small real MCP server (the official SDK's), tools
// registered and enabled through the API, the wallet on real PostgreSQL. The loop (model → MCP
// tools/call → model) on /api/chat/completions and /api/responses, streamed and not, each call
// charged; pins and enablement refused with 403 naming the tool; tool failures the model reads;
// the wall clock (REQUEST_TIMEOUT_MS, short here) ending a loop that would not finish in time.
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEngineSim, type EngineSimHandle } from '@berth/engine-sim';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { startMcpServer, type TestMcpServer } from '@berth/test/support/mcp-server';

const MCP_TOKEN = 'Bearer mcp-token-7';
const WALL_CLOCK_MS = 4000;
let api: TestApi;
let sim: EngineSimHandle;
let mcp: TestMcpServer;

beforeAll(async () => {
  [api, sim, mcp] = await Promise.all([
    startTestApi({
      BERTH_SECRETS_KEY: 'cd'.repeat(32),
      BILLING_FLUSH_INTERVAL_MS: '200',
      REQUEST_TIMEOUT_MS: String(WALL_CLOCK_MS),
    }),
    startEngineSim({ model: 'org/tools', ttftMs: 1, itlMs: 0, maxModelLen: 1_000_000 }),
    startMcpServer({ requireAuthorization: MCP_TOKEN }),
  ]);
  await api.chatModel(
    'tools-chat',
    { engineUrl: sim.url, model: 'org/tools' },
    { inputPerMTok: '0.10', outputPerMTok: '0.20' },
  );
  const tool = (id: string, body: object) =>
    api.admin(`/admin/tools/${id}`, {
      method: 'PUT',
      body: JSON.stringify({ description: id, url: mcp.url, headers: { Authorization: MCP_TOKEN }, ...body }),
    });
  expect((await tool('toolbox', { price_per_call: '0.002', timeout_ms: 10_000 })).status).toBe(201);
  expect((await tool('other', { price_per_call: '0.001' })).status).toBe(201);
  expect((await tool('down', { price_per_call: '0.001', url: 'http://127.0.0.1:9/mcp' })).status).toBe(201);
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await Promise.all([sim?.close(), mcp?.close()]);
});

async function account(tools: string[] = ['toolbox']) {
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
  return {
    ...acct,
    client: new OpenAI({ baseURL: api.url + '/api', apiKey: acct.inference, maxRetries: 0 }),
  };
}

/** The account's usage rows of managed tools, as GET /api/billing/usage shows them. */
async function toolUsage(globalKey: string) {
  await api.billing.wallet.flush();
  const r = await fetch(api.url + '/api/billing/usage', { headers: bearer(globalKey) });
  expect(r.status).toBe(200);
  const { data } = (await r.json()) as { data: { model: string; requests: number; cost: string }[] };
  return data
    .filter((d) => d.model.startsWith('tool:'))
    .map((d) => ({ model: d.model, requests: d.requests, cost: d.cost }));
}

const TOOLBOX = { type: 'mcp', server_label: 'toolbox' } as never;
const PLAN = 'Plan:\ncall weather {"city": "Paris"}\ncall add {"a": 2, "b": 3}';
const ANSWER = 'Tool results: weather: Sunny, 21 C in Paris; add: 5';

describe('the managed loop on /api/chat/completions', () => {
  it('two tool calls, their results back to the model, one answer; each call charged at the tool’s price', async () => {
    const acct = await account();
    const before = mcp.calls.length;
    const r = await acct.client.chat.completions
      .create({ model: 'tools-chat', messages: [{ role: 'user', content: PLAN }], tools: [TOOLBOX] })
      .withResponse();
    const c = r.data as typeof r.data & { berth_tool_calls: { name: string; output: string }[] };
    expect(c.model).toBe('tools-chat');
    expect(c.choices[0]!.message.content).toBe(ANSWER);
    expect(c.choices[0]!.finish_reason).toBe('stop');
    expect(c.berth_tool_calls.map((t) => [t.name, t.output])).toEqual([
      ['weather', 'Sunny, 21 C in Paris'],
      ['add', '5'],
    ]);
    expect(mcp.calls.slice(before).map((x) => [x.name, x.args, x.authorization])).toEqual([
      ['weather', { city: 'Paris' }, MCP_TOKEN],
      ['add', { a: 2, b: 3 }, MCP_TOKEN],
    ]);
    expect(c.usage!.prompt_tokens).toBeGreaterThan(0);
    expect(await toolUsage(acct.global)).toEqual([{ model: 'tool:toolbox', requests: 2, cost: '0.004000' }]);
  });

  it('streamed: the tool calls and results arrive as events, then the answer, then [DONE]; charged the same', async () => {
    const acct = await account();
    const chunks: {
      choices: { delta: { content?: string | null } }[];
      berth_tool?: { type: string; name: string; output?: string };
    }[] = [];
    const stream = await acct.client.chat.completions.create({
      model: 'tools-chat',
      messages: [{ role: 'user', content: PLAN }],
      tools: [TOOLBOX],
      stream: true,
    });
    for await (const chunk of stream) chunks.push(chunk as never);
    const tools = chunks.filter((c) => c.berth_tool).map((c) => [c.berth_tool!.type, c.berth_tool!.name]);
    expect(tools).toEqual([
      ['tool_call', 'weather'],
      ['tool_result', 'weather'],
      ['tool_call', 'add'],
      ['tool_result', 'add'],
    ]);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(ANSWER);
    expect(await toolUsage(acct.global)).toEqual([{ model: 'tool:toolbox', requests: 2, cost: '0.004000' }]);

    const raw = await fetch(api.url + '/api/chat/completions', {
      method: 'POST',
      headers: { ...bearer(acct.inference), 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'tools-chat',
        messages: [{ role: 'user', content: 'call add {"a": 1, "b": 1}' }],
        tools: [TOOLBOX],
        stream: true,
      }),
    });
    expect(raw.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await raw.text();
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(text).toContain('"berth_tool":{"type":"tool_result"');
  });

  it('max_tokens bounds each model step: a tool call it cut is neither run nor returned as the answer', async () => {
    const acct = await account();
    const before = mcp.calls.length;
    const c = (await acct.client.chat.completions.create({
      model: 'tools-chat',
      messages: [{ role: 'user', content: PLAN }],
      tools: [TOOLBOX],
      max_tokens: 6,
    })) as Awaited<ReturnType<typeof acct.client.chat.completions.create>> & {
      berth_tool_calls: unknown[];
    };
    const choice = (c as { choices: { message: { content: string | null }; finish_reason: string }[] })
      .choices[0]!;
    expect(choice.finish_reason).toBe('length');
    expect(choice.message.content ?? '').not.toContain('<tool_call>');
    expect(c.berth_tool_calls).toEqual([]);
    expect(mcp.calls.length).toBe(before);
    // Streamed, the same: no delta carries the half-written call.
    const stream = await acct.client.chat.completions.create({
      model: 'tools-chat',
      messages: [{ role: 'user', content: PLAN }],
      tools: [TOOLBOX],
      max_tokens: 6,
      stream: true,
    });
    let text = '';
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(text).not.toContain('<tool_call>');
    expect(finish).toBe('length');
    expect(mcp.calls.length).toBe(before);
  });

  it('client function tools pass through untouched: a turn calling one comes back to the client', async () => {
    const acct = await account();
    const before = mcp.calls.length;
    const c = await acct.client.chat.completions.create({
      model: 'tools-chat',
      messages: [{ role: 'user', content: 'call lookup {"q": "x"}' }],
      tools: [TOOLBOX, { type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }],
    });
    expect(c.choices[0]!.finish_reason).toBe('tool_calls');
    const call = c.choices[0]!.message.tool_calls![0] as { function: { name: string; arguments: string } };
    expect([call.function.name, call.function.arguments]).toEqual(['lookup', '{"q": "x"}']);
    expect(mcp.calls.length).toBe(before);
  });

  it('a failing tool and an unreachable server are results the model reads, not a 500', async () => {
    const acct = await account(['toolbox', 'down']);
    const c = await acct.client.chat.completions.create({
      model: 'tools-chat',
      messages: [{ role: 'user', content: 'call fail' }],
      tools: [TOOLBOX, { type: 'mcp', server_label: 'down' } as never],
    });
    expect(c.choices[0]!.message.content).toBe('Tool results: fail: the fail tool failed on purpose');
    // The failed call answered (isError): charged like any answered call.
    expect(await toolUsage(acct.global)).toEqual([{ model: 'tool:toolbox', requests: 1, cost: '0.002000' }]);
  });

  it('the wall clock ends a loop that would not finish in time: 504, the MCP call cut', async () => {
    const acct = await account();
    const started = Date.now();
    const slow = Array.from({ length: 6 }, () => 'call slow {"ms": 1500}').join('\n');
    const err = await acct.client.chat.completions
      .create({ model: 'tools-chat', messages: [{ role: 'user', content: slow }], tools: [TOOLBOX] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err).toMatchObject({
      status: 504,
      error: { message: `The request exceeded the wall-clock limit of ${WALL_CLOCK_MS / 1000} s` },
    });
    const took = Date.now() - started;
    expect(took).toBeGreaterThanOrEqual(WALL_CLOCK_MS - 100);
    expect(took).toBeLessThan(WALL_CLOCK_MS + 2000);
  });
});

describe('the wall clock on a streamed loop', () => {
  it('after the first events, the cut arrives as an error frame the SDK raises, then [DONE]', async () => {
    const acct = await account();
    const slow = Array.from({ length: 6 }, () => 'call slow {"ms": 1500}').join('\n');
    const seen: string[] = [];
    const started = Date.now();
    const stream = await acct.client.chat.completions.create({
      model: 'tools-chat',
      messages: [{ role: 'user', content: slow }],
      tools: [TOOLBOX],
      stream: true,
    });
    const err = await (async () => {
      for await (const chunk of stream) {
        const tool = (chunk as { berth_tool?: { type: string } }).berth_tool;
        if (tool) seen.push(tool.type);
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as Error).message).toContain(
      `The request exceeded the wall-clock limit of ${WALL_CLOCK_MS / 1000} s`,
    );
    expect(seen.slice(0, 2)).toEqual(['tool_call', 'tool_result']);
    expect(Date.now() - started).toBeLessThan(WALL_CLOCK_MS + 2000);
  });
});

describe('managed tools with Olympus', () => {
  it('model auto with managed tools: Olympus chooses a chat model, the loop runs on it', async () => {
    const acct = await account(['toolbox', 'olympus']);
    const r = await acct.client.chat.completions
      .create({ model: 'auto', messages: [{ role: 'user', content: PLAN }], tools: [TOOLBOX] })
      .withResponse();
    expect(r.data.model).toBe('tools-chat');
    expect(r.response.headers.get('x-berth-olympus-reason')).toBe('cheapest');
    expect(r.data.choices[0]!.message.content).toBe(ANSWER);
    expect(await toolUsage(acct.global)).toEqual([{ model: 'tool:toolbox', requests: 2, cost: '0.004000' }]);
  });
});

describe('the managed loop on /api/responses', () => {
  it('mcp_call items for the calls, then the message; streamed as typed events', async () => {
    const acct = await account();
    const r = await acct.client.responses.create({
      model: 'tools-chat',
      input: PLAN,
      tools: [{ type: 'mcp', server_label: 'toolbox', require_approval: 'never' } as never],
    });
    expect(r.model).toBe('tools-chat');
    expect(r.status).toBe('completed');
    expect(r.output.map((o) => o.type)).toEqual(['mcp_call', 'mcp_call', 'message']);
    expect(r.output[0]).toMatchObject({
      type: 'mcp_call',
      server_label: 'toolbox',
      name: 'weather',
      arguments: '{"city": "Paris"}',
      output: 'Sunny, 21 C in Paris',
      error: null,
    });
    expect(r.output_text).toBe(ANSWER);

    const types: string[] = [];
    let completed: OpenAI.Responses.Response | undefined;
    for await (const e of await acct.client.responses.create({
      model: 'tools-chat',
      input: PLAN,
      tools: [{ type: 'mcp', server_label: 'toolbox' } as never],
      stream: true,
    })) {
      types.push(e.type);
      if (e.type === 'response.completed') completed = e.response;
    }
    expect(types.filter((t) => t.startsWith('response.mcp_call.'))).toEqual([
      'response.mcp_call.completed',
      'response.mcp_call.completed',
    ]);
    expect(types[0]).toBe('response.created');
    expect(types.at(-1)).toBe('response.completed');
    expect(completed?.output_text ?? completed?.output.at(-1)).toBeTruthy();
    expect(await toolUsage(acct.global)).toEqual([{ model: 'tool:toolbox', requests: 4, cost: '0.008000' }]);
  });
});

describe('who may use which managed tool', () => {
  it('a key whose tool pin leaves the tool out: 403 naming it; nothing called or charged', async () => {
    const acct = await account(['toolbox', 'other']);
    const key = await api.admin(`/admin/accounts/${acct.id}/keys`, {
      method: 'POST',
      body: JSON.stringify({ name: 'pinned', scope: 'inference', toolPin: ['other'] }),
    });
    const pinned = new OpenAI({
      baseURL: api.url + '/api',
      apiKey: ((await key.json()) as { value: string }).value,
      maxRetries: 0,
    });
    const before = mcp.calls.length;
    const err = await pinned.chat.completions
      .create({ model: 'tools-chat', messages: [{ role: 'user', content: PLAN }], tools: [TOOLBOX] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(err).toMatchObject({
      status: 403,
      code: 'tool_not_allowed',
      param: 'tools',
      error: { message: `Tool "toolbox" is not allowed by this API key's tool pin` },
    });
    // The pinned tool itself works for that key.
    const ok = await pinned.chat.completions.create({
      model: 'tools-chat',
      messages: [{ role: 'user', content: 'call add {"a": 1, "b": 2}' }],
      tools: [{ type: 'mcp', server_label: 'other' } as never],
    });
    expect(ok.choices[0]!.message.content).toBe('Tool results: add: 3');
    expect(mcp.calls.length).toBe(before + 1);
    expect(await toolUsage(acct.global)).toEqual([{ model: 'tool:other', requests: 1, cost: '0.001000' }]);
  });

  it('a tool not enabled for the account: 403 naming it; an unknown tool or a bad entry: 400 naming the field', async () => {
    const acct = await account([]);
    const ask = (tools: unknown[]) =>
      fetch(api.url + '/api/chat/completions', {
        method: 'POST',
        headers: { ...bearer(acct.inference), 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tools-chat', messages: [{ role: 'user', content: 'x' }], tools }),
      });
    const off = await ask([{ type: 'mcp', server_label: 'toolbox' }]);
    expect(off.status).toBe(403);
    const message =
      'Tool "toolbox" is not enabled for this account; enable it with POST /api/tools {"tool_id": "toolbox"}';
    expect(await off.json()).toEqual({
      error: { message, type: 'permission_error', code: 'tool_not_allowed', param: 'tools' },
      message,
    });
    const cases: [unknown[], number, string, string][] = [
      [
        [{ type: 'mcp', server_label: 'nope' }],
        400,
        'tools',
        'Unknown tool "nope" (GET /api/tools lists the catalog)',
      ],
      [
        [{ type: 'mcp' }],
        400,
        'tools.0.server_label',
        'Invalid request body: tools.0.server_label: must name a managed tool (GET /api/tools lists them)',
      ],
      [
        [{ type: 'mcp', server_label: 'toolbox', server_url: 'https://evil.example/mcp' }],
        400,
        'tools.0.server_url',
        'Invalid request body: tools.0.server_url: is not supported: managed tools are MCP servers the platform registers, named by server_label',
      ],
    ];
    for (const [tools, status, param, msg] of cases) {
      const r = await ask(tools);
      expect(r.status, param).toBe(status);
      expect((await r.json()).error, param).toMatchObject({ param, message: msg });
    }
    const balance = await fetch(api.url + '/api/billing/balance', { headers: bearer(acct.global) });
    expect((await balance.json()).balance).toBe('1.000000');
  });
});
