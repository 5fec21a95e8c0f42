// Hostile MCP servers against MANAGED_TOOL_MAX_RESPONSE_BYTES (64 KiB here), end to end with the
// official OpenAI SDK: a tool result past the limit — as an event stream, as a JSON body with its
// Content-Length, or as a chunked JSON body that never ends — reaches the model as `Error: …` and is
// not charged, and the API stops reading it (the flood is cut); a tools/list past the limit makes the
// tool unavailable (named to the model), not a 402 or a 500. Under the limit, nothing changes.
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEngineSim, type EngineSimHandle } from '@berth/engine-sim';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { startMcpServer, type TestMcpServer } from '@berth/test/support/mcp-server';
import { openMcpSession } from '../src/tools/mcp.ts';

const LIMIT = 65_536;
const TOO_LARGE = `Error: the tool server's answer is larger than ${LIMIT} bytes (MANAGED_TOOL_MAX_RESPONSE_BYTES), so it was not read`;
let api: TestApi;
let sim: EngineSimHandle;
let streamed: TestMcpServer;
let json: TestMcpServer;
let listed: TestMcpServer;

beforeAll(async () => {
  [api, sim, streamed, json, listed] = await Promise.all([
    startTestApi({ BILLING_FLUSH_INTERVAL_MS: '200', MANAGED_TOOL_MAX_RESPONSE_BYTES: String(LIMIT) }),
    startEngineSim({ model: 'org/tools', ttftMs: 1, itlMs: 0, maxModelLen: 1_000_000 }),
    startMcpServer(),
    startMcpServer({ json: true }),
    startMcpServer({ listPadding: 2 * LIMIT }),
  ]);
  const model = {
    kind: 'chat',
    backends: [{ baseUrl: `${sim.url}/v1`, model: 'org/tools' }],
    pricing: { inputPerMTok: '0.10', outputPerMTok: '0.20' },
  };
  expect(
    (await api.admin('/admin/models/tools-chat', { method: 'PUT', body: JSON.stringify(model) })).status,
  ).toBe(201);
  for (const [id, server] of [
    ['streamed', streamed],
    ['json', json],
    ['listed', listed],
  ] as const) {
    const put = await api.admin(`/admin/tools/${id}`, {
      method: 'PUT',
      body: JSON.stringify({ description: id, url: server.url, price_per_call: '0.002', timeout_ms: 30_000 }),
    });
    expect(put.status).toBe(201);
  }
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await Promise.all([sim?.close(), streamed?.close(), json?.close(), listed?.close()]);
});

async function account(tool: string) {
  const acct = await api.newAccount();
  const json = { 'content-type': 'application/json' };
  const credited = await api.admin(`/admin/accounts/${acct.id}/credits`, {
    method: 'POST',
    headers: { ...json, 'idempotency-key': randomUUID() },
    body: '{"amount": "1.00"}',
  });
  const enabled = await fetch(`${api.url}/api/tools`, {
    method: 'POST',
    headers: { ...bearer(acct.global), ...json },
    body: JSON.stringify({ tool_id: tool }),
  });
  expect([credited.status, enabled.status]).toEqual([201, 200]);
  return {
    ...acct,
    client: new OpenAI({ baseURL: `${api.url}/api`, apiKey: acct.inference, maxRetries: 0 }),
  };
}

/** The account's charged tool calls (GET /api/billing/usage). */
async function toolCalls(globalKey: string): Promise<number> {
  await api.billing.wallet.flush();
  const r = await fetch(`${api.url}/api/billing/usage`, { headers: bearer(globalKey) });
  const { data } = (await r.json()) as { data: { model: string; requests: number }[] };
  return data.filter((d) => d.model.startsWith('tool:')).reduce((n, d) => n + d.requests, 0);
}

async function callTool(tool: string, plan: string) {
  const acct = await account(tool);
  const c = await acct.client.chat.completions.create({
    model: 'tools-chat',
    messages: [{ role: 'user', content: `Plan:\n${plan}` }],
    tools: [{ type: 'mcp', server_label: tool } as never],
  });
  const calls =
    (c as typeof c & { berth_tool_calls?: { name: string; output: string }[] }).berth_tool_calls ?? [];
  return { acct, answer: c.choices[0]!.message.content ?? '', calls };
}

describe('a tool result past MANAGED_TOOL_MAX_RESPONSE_BYTES', () => {
  it.each([
    ['an event stream', 'streamed'],
    ['a JSON body with its Content-Length', 'json'],
  ])(
    'as %s: the model reads Error: …, nothing is charged; under the limit it is read and charged',
    async (_, tool) => {
      const over = await callTool(tool, `call huge {"bytes": ${20 * LIMIT}}`);
      expect(over.calls.map((c) => [c.name, c.output])).toEqual([['huge', TOO_LARGE]]);
      expect(over.answer).toBe(`Tool results: huge: ${TOO_LARGE}`);
      expect(await toolCalls(over.acct.global)).toBe(0);

      const under = await callTool(tool, `call huge {"bytes": ${LIMIT / 2}}`);
      expect(under.calls.map((c) => [c.name, c.output.length])).toEqual([['huge', LIMIT / 2]]);
      expect(await toolCalls(under.acct.global)).toBe(1);
    },
  );

  it('as a chunked JSON body that never ends (50 MB offered): cut at the limit, the server stops writing', async () => {
    const before = streamed.flooded.length;
    const over = await callTool('streamed', `call flood {"bytes": ${50 * 1024 * 1024}}`);
    expect(over.calls.map((c) => [c.name, c.output])).toEqual([['flood', TOO_LARGE]]);
    expect(await toolCalls(over.acct.global)).toBe(0);
    // The API cancelled the body: the server wrote what the socket buffers held, far from 50 MB.
    await expect.poll(() => streamed.flooded.length).toBe(before + 1);
    const written = streamed.flooded.at(-1)!;
    console.error(`mcp limits: a 50 MB flood cut after ${written} bytes were written`);
    expect(written).toBeLessThan(16 * 1024 * 1024);
  });
});

describe('a tools/list past the limit', () => {
  it('the session is not opened, saying why (the loop names it to the model as unavailable)', async () => {
    const target = { url: listed.url, headers: {}, timeoutMs: 10_000, maxResponseBytes: LIMIT };
    await expect(openMcpSession(target, AbortSignal.timeout(10_000))).rejects.toThrow(
      new Error(TOO_LARGE.slice('Error: '.length)),
    );
    // With a limit above the whole list, the same server opens.
    const pages = { ...target, maxResponseBytes: 3 * LIMIT };
    expect((await openMcpSession(pages, AbortSignal.timeout(10_000))).tools.map((t) => t.name)).toContain(
      'padded',
    );
  });

  it('end to end: no call is made or charged, the answer is 200', async () => {
    const before = listed.calls.length;
    const r = await callTool('listed', 'call padded {}');
    expect(r.calls).toEqual([]);
    expect(listed.calls.length).toBe(before);
    expect(await toolCalls(r.acct.global)).toBe(0);
  });
});

describe('a Chronos tool step', () => {
  it('whose result is past the limit fails with the same error, and neither the tool nor the run fee is charged', async () => {
    const acct = await account('streamed');
    const send = (method: string, path: string, body?: unknown) =>
      fetch(api.url + path, {
        method,
        headers: { ...bearer(acct.global), 'content-type': 'application/json' },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
    expect((await send('POST', '/api/tools', { tool_id: 'chronos' })).status).toBe(200);
    const created = await send('POST', '/api/chronos/runs', {
      name: 'huge',
      schedule: '@yearly',
      timezone: 'UTC',
      steps: [{ type: 'tool', tool_id: 'streamed', name: 'huge', input: { bytes: 20 * LIMIT } }],
    });
    expect(created.status).toBe(201);
    const { id } = (await created.json()) as { id: string };
    expect((await send('POST', `/api/chronos/runs/${id}/trigger`)).status).toBe(202);
    await expect
      .poll(
        async () =>
          (
            (await (await send('GET', `/api/chronos/runs/${id}/executions`)).json()) as {
              data: { status: string }[];
            }
          ).data[0]?.status,
        { timeout: 20_000, interval: 200 },
      )
      .toBe('failed');
    const [e] = (
      (await (await send('GET', `/api/chronos/runs/${id}/executions`)).json()) as {
        data: { reason: string; cost: string; fee: string; steps: { error: string; cost: string }[] }[];
      }
    ).data;
    expect(e!.steps.map((s) => [s.error, s.cost])).toEqual([[TOO_LARGE, '0.000000']]);
    expect([e!.cost, e!.fee]).toEqual(['0.000000', '0.000000']);
    expect(await toolCalls(acct.global)).toBe(0);
  });
});
