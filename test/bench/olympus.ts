// Olympus and managed tools (issue 14):
// - decision time: pickModel() over a 24-model catalog (policy objective cost, some pools cooling or
//   cold), against the baseline of JSON.parse of the same chat request body, alternating batches;
// - managed-loop overhead per tool call: a loop whose model answers instantly with one scripted
//   call per step (so all that is left is the loop and MCP), against the same MCP tools/call made
//   directly on an open session of the same real MCP server, alternating.
import { openMcpSession, pickModel, runManagedLoop, type Candidate, type ModelStep } from '@berth/api';
import { startMcpServer } from '../support/mcp-server.ts';
import { machine, ms, summarize } from './stats.ts';

const N = Number(process.env.BENCH_OLYMPUS_DECISIONS ?? 50_000);
const CALLS = Number(process.env.BENCH_TOOL_CALLS ?? 400);

function catalog(): Candidate[] {
  return Array.from({ length: 24 }, (_, i) => ({
    name: `model-${i}`,
    kind: i % 8 === 7 ? ('embedding' as const) : ('chat' as const),
    contextLength: 4096 << (i % 5),
    tools: i % 3 !== 0,
    inputPerMTok: BigInt(50_000 + ((i * 7919) % 900_000)),
    outputPerMTok: BigInt(100_000 + ((i * 104_729) % 2_000_000)),
    latencyMs: 20 + ((i * 37) % 300),
    quality: i % 6,
    warm: i % 4 !== 1,
    ...(i % 5 === 2 ? { coolingUntil: Date.now() + 60_000 } : {}),
  }));
}

async function decisions(): Promise<string> {
  const models = catalog();
  const body = JSON.stringify({
    model: 'auto',
    messages: [
      { role: 'system', content: 'You are helpful.' },
      { role: 'user', content: 'Summarise the attached text in three bullet points. '.repeat(20) },
    ],
    max_tokens: 512,
    tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }],
  });
  const decide: number[] = [];
  const parse: number[] = [];
  let sink = 0;
  for (let round = 0; round < N / 1000; round++) {
    for (let i = 0; i < 1000; i++) {
      let t = process.hrtime.bigint();
      const parsed = JSON.parse(body) as { max_tokens: number };
      parse.push(Number(process.hrtime.bigint() - t) / 1e6);
      t = process.hrtime.bigint();
      const choice = pickModel(
        { kind: 'chat', promptTokens: body.length + 256, maxTokens: parsed.max_tokens, tools: true },
        { allowedModels: [], objective: i % 2 ? 'cost' : 'latency' },
        models,
        Date.now(),
      );
      decide.push(Number(process.hrtime.bigint() - t) / 1e6);
      if (choice.ok) sink += choice.model.length;
    }
  }
  if (sink === 0) throw new Error('no decision');
  const d = summarize(decide);
  const p = summarize(parse);
  return [
    `| measure (${N} requests) | p50 | p99 |`,
    '|---|---|---|',
    `| JSON.parse of the request body (baseline, ${body.length} bytes) | ${ms(p.p50)} | ${ms(p.p99)} |`,
    `| Olympus decision (24 models) | ${ms(d.p50)} | ${ms(d.p99)} |`,
    `| ratio decision / baseline | ${(d.p50 / p.p50).toFixed(2)}x | ${(d.p99 / p.p99).toFixed(2)}x |`,
  ].join('\n');
}

async function loopOverhead(): Promise<string> {
  const mcp = await startMcpServer();
  const signal = new AbortController().signal;
  try {
    const direct = await openMcpSession({ url: mcp.url, headers: {}, timeoutMs: 10_000 }, signal);
    const server = {
      toolId: 'bench',
      pricePerCall: 1n,
      session: await openMcpSession({ url: mcp.url, headers: {}, timeoutMs: 10_000 }, signal),
    };
    let id = 0;
    // An instant model: one call per step until `calls` are made, then an answer.
    const model =
      (calls: number) =>
      async (body: Record<string, unknown>): Promise<ModelStep> => {
        const made = (body.messages as { role: string }[]).filter((m) => m.role === 'tool').length;
        if (made >= calls)
          return { message: { role: 'assistant', content: 'done' }, finish_reason: 'stop', model: 'm' };
        const call = {
          id: `c${id++}`,
          type: 'function' as const,
          function: { name: 'add', arguments: '{"a": 1, "b": 2}' },
        };
        return {
          message: { role: 'assistant', content: null, tool_calls: [call] },
          finish_reason: 'tool_calls',
          model: 'm',
        };
      };
    const charge = async () => ({ settle() {}, release() {} });
    const PER_LOOP = 10;
    const viaLoop: number[] = [];
    const raw: number[] = [];
    for (let i = 0; i < 20; i++) await direct.call('add', { a: 1, b: 2 }, signal); // warm-up
    for (let round = 0; round < CALLS / PER_LOOP; round++) {
      let t = process.hrtime.bigint();
      for (let i = 0; i < PER_LOOP; i++) await direct.call('add', { a: 1, b: 2 }, signal);
      raw.push(Number(process.hrtime.bigint() - t) / 1e6 / PER_LOOP);
      t = process.hrtime.bigint();
      await runManagedLoop({
        body: { messages: [{ role: 'user', content: 'x' }] },
        servers: [server],
        callModel: model(PER_LOOP),
        charge,
        maxSteps: PER_LOOP + 2,
        signal,
      });
      viaLoop.push(Number(process.hrtime.bigint() - t) / 1e6 / PER_LOOP);
    }
    await direct.close();
    await server.session.close();
    const r = summarize(raw);
    const l = summarize(viaLoop);
    return [
      `| per tool call (${CALLS} calls, batches of ${PER_LOOP}) | p50 | p99 |`,
      '|---|---|---|',
      `| MCP tools/call on an open session (baseline) | ${ms(r.p50)} | ${ms(r.p99)} |`,
      `| the same call through the managed loop | ${ms(l.p50)} | ${ms(l.p99)} |`,
      `| overhead (loop − baseline) | ${ms(l.p50 - r.p50)} | ${ms(l.p99 - r.p99)} |`,
      `| ratio loop / baseline | ${(l.p50 / r.p50).toFixed(2)}x | ${(l.p99 / r.p99).toFixed(2)}x |`,
    ].join('\n');
  } finally {
    await mcp.close();
  }
}

export async function benchOlympus(): Promise<string> {
  return [
    `### Olympus decision time and managed-loop overhead (${machine()})`,
    '',
    await decisions(),
    '',
    await loopOverhead(),
  ].join('\n');
}
