// Olympus and managed tools (issue 14):
// - decision time: pickModel() over a 24-model catalog (policy objective cost, some pools cooling or
//   cold), against the baseline of JSON.parse of the same chat request body, alternating batches;
// - managed-loop overhead per tool call: a loop whose model answers instantly with one scripted
//   call per step (so all that is left is the loop and MCP), against the same MCP tools/call made
//   directly on an open session of the same real MCP server, alternating.
import {
  chooseModel,
  elasticCaller,
  openMcpSession,
  pickModel,
  proxyAgent,
  routeMatcher,
  runManagedLoop,
  type Candidate,
  type CatalogModel,
  type ModelStep,
} from '@berth/api';
import { startEngineSim } from '@berth/engine-sim';
import { startMcpServer } from '../support/mcp-server.ts';
import { machine, ms, summarize } from './stats.ts';

const N = Number(process.env.BENCH_OLYMPUS_DECISIONS ?? 50_000);
const CALLS = Number(process.env.BENCH_TOOL_CALLS ?? 400);
const ROUTED = Number(process.env.BENCH_OLYMPUS_ROUTED ?? 2000);

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

/**
 * Decision time with the embedding route: chooseModel() for a policy with 4 routes of 10 example
 * prompts each (their vectors cached, as after the first request), i.e. the access check and policy
 * (in memory here: the two indexed queries are outside), one embedding call to an engine-simulator
 * embedding pool through the Elastic call path (real HTTP, the proxy's agent), cosine against the
 * 40 examples and pickModel() — against its baseline, the same embedding call alone, alternating
 * batches of 50.
 */
async function routedDecisions(): Promise<string> {
  const sim = await startEngineSim({ model: 'org/embed', ttftMs: 0, embeddingDimensions: 384 });
  const dispatcher = proxyAgent();
  try {
    const at = new Date();
    const chat = catalog()
      .filter((c) => c.kind === 'chat')
      .map((c): CatalogModel => ({
        name: c.name,
        kind: 'chat',
        pricing: { inputPerMTok: c.inputPerMTok, outputPerMTok: c.outputPerMTok },
        contextLength: c.contextLength,
        fallbacks: [],
        backends: [{ baseUrl: 'http://127.0.0.1:9/v1', model: c.name }],
        updatedAt: at,
      }));
    const embedder: CatalogModel = {
      name: 'embedder',
      kind: 'embedding',
      pricing: { inputPerMTok: 10_000n, outputPerMTok: 0n },
      contextLength: 8192,
      fallbacks: [],
      backends: [{ baseUrl: sim.url + '/v1', model: 'org/embed' }],
      updatedAt: at,
    };
    const models = [...chat, embedder];
    const cat = { get: (n: string) => models.find((m) => m.name === n), list: () => models };
    const caller = elasticCaller({
      catalog: cat as never,
      wallet: {} as never, // the embedding call is not charged: the wallet is never asked
      dispatcher,
      config: { wakeHoldMs: 1000, retries: 0, cooldownMs: 1000 },
    });
    const topics = ['python code', 'contract law', 'cooking recipes', 'travel plans'];
    const policy = {
      allowedModels: [],
      objective: 'cost' as const,
      routes: topics.map((t, i) => ({
        name: `r${i}`,
        model: chat[i]!.name,
        examples: Array.from({ length: 10 }, (_, j) => `question ${j} about ${t} and how to handle it well`),
      })),
      routeThreshold: 0.5,
      embeddingModel: null,
      updatedAt: at,
    };
    const logger = { warn() {}, info() {} };
    const routes = routeMatcher({ catalog: cat, caller, timeoutMs: 5000, logger });
    const tool = { tool: {} as never, enabled: true };
    const deps = {
      tools: { lookup: async () => new Map([['olympus', tool]]) },
      policies: { get: async () => policy },
      catalog: cat,
      live: caller,
      routes,
    };
    const who = { accountId: 'bench', toolPin: [] };
    const prompt = 'Please write some python code that parses a contract and how to handle it well';
    const body = { model: 'auto', messages: [{ role: 'user', content: prompt }], max_tokens: 256 };
    // Each request has its own signal, as each HTTP request does.
    const signal = new AbortController().signal;
    const ask = { kinds: ['chat' as const], body, requestBytes: 600, tools: false, requestId: 'b', signal };
    const first = await chooseModel(deps, who, ask); // embeds the examples once
    if (first.routing?.outcome !== 'matched') throw new Error(`no route matched: ${first.routing?.outcome}`);
    // The same decision with an embedding call that answers at once (vectors the simulator gave):
    // what Olympus itself adds — access, candidates, the signal and budget, cosine, pickModel.
    const known = new Map<string, number[]>();
    const texts = [prompt, ...policy.routes.flatMap((r) => r.examples)];
    (await caller.embed({ model: embedder, inputs: texts, requestId: 'k', signal })).forEach((v, i) =>
      known.set(texts[i]!, v),
    );
    const instant = {
      ...deps,
      routes: routeMatcher({
        catalog: cat,
        caller: { embed: async ({ inputs }) => inputs.map((t) => known.get(t)!) },
        timeoutMs: 5000,
        logger,
      }),
    };
    await chooseModel(instant, who, ask);
    const own: number[] = [];
    const alone: number[] = [];
    const decide: number[] = [];
    for (let i = 0; i < 50; i++)
      await caller.embed({ model: embedder, inputs: [prompt], requestId: 'w', signal });
    for (let round = 0; round < ROUTED / 50; round++) {
      for (let i = 0; i < 50; i++) {
        const t = process.hrtime.bigint();
        await caller.embed({
          model: embedder,
          inputs: [prompt],
          requestId: 'b',
          signal: new AbortController().signal,
        });
        alone.push(Number(process.hrtime.bigint() - t) / 1e6);
      }
      for (let i = 0; i < 50; i++) {
        const t = process.hrtime.bigint();
        const c = await chooseModel(deps, who, { ...ask, signal: new AbortController().signal });
        decide.push(Number(process.hrtime.bigint() - t) / 1e6);
        if (c.reason !== first.reason) throw new Error(`choice changed: ${c.reason}`);
      }
      for (let i = 0; i < 50; i++) {
        const t = process.hrtime.bigint();
        const c = await chooseModel(instant, who, { ...ask, signal: new AbortController().signal });
        own.push(Number(process.hrtime.bigint() - t) / 1e6);
        if (c.reason !== first.reason) throw new Error(`choice changed: ${c.reason}`);
      }
    }
    const o = summarize(own);
    const a = summarize(alone);
    const d = summarize(decide);
    return [
      `| with the embedding route (${ROUTED} requests, 4 routes × 10 examples, 384-d, reason ${first.reason}) | p50 | p99 |`,
      '|---|---|---|',
      `| one embedding call through the Elastic path (baseline) | ${ms(a.p50)} | ${ms(a.p99)} |`,
      `| Olympus decision with the embedding route | ${ms(d.p50)} | ${ms(d.p99)} |`,
      `| added over the embedding call | ${ms(d.p50 - a.p50)} | ${ms(d.p99 - a.p99)} |`,
      `| the same decision with an instant embedding (Olympus's own work) | ${ms(o.p50)} | ${ms(o.p99)} |`,
    ].join('\n');
  } finally {
    await dispatcher.close();
    await sim.close();
  }
}

async function loopOverhead(): Promise<string> {
  const mcp = await startMcpServer();
  const signal = new AbortController().signal;
  try {
    const target = { url: mcp.url, headers: {}, timeoutMs: 10_000, maxResponseBytes: 1_048_576 };
    const direct = await openMcpSession(target, signal);
    const server = {
      toolId: 'bench',
      pricePerCall: 1n,
      session: await openMcpSession(target, signal),
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
    await routedDecisions(),
    '',
    await loopOverhead(),
  ].join('\n');
}
