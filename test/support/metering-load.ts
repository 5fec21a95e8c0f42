// Metering checked against the engines (issue 32): one Berth (local mode, real PostgreSQL) with every
// kind of paid call — chat, text completions, responses and embeddings on catalog models, streamed and
// not; the pinned-model route; Olympus (`auto`); managed tool loops; Chronos runs with chat and tool
// steps; dedicated endpoints called by id and by `model` — and a tenth of the streams cut by the client
// at a random chunk. What Berth recorded (usage rows, ledger charges) is compared with the engines' own
// counters (`vllm:prompt_tokens_total`, `vllm:generation_tokens_total`, read from their /metrics).
//
// Every paid call that completes is made by one account, every cut stream by another, each with its
// own engines: so the first account's records must equal its engines' counters token for token (and
// its charges equal tokens × prices, micro-unit for micro-unit: prices are whole micro-units per
// token), while the second's show what cut streams leave unbilled.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startEngineSim, type EngineSimHandle } from '@berth/engine-sim';
import { bearer, startTestApi, type TestApi } from './api.ts';
import { eventually } from './eventually.ts';
import { startMcpServer } from './mcp-server.ts';
import { counters, delta, minus, records, type Counters } from './metering.ts';
import { sql } from './postgres.ts';

/** µ per token (input, output): prices in whole micro-units per token, so no call's cost is rounded. */
const PRICES = {
  chat: [1n, 2n],
  'tools-chat': [1n, 1n],
  embed: [1n, 1n],
  'cut-chat': [1n, 2n],
  'cut-responses': [1n, 2n],
} as const;
type Model = keyof typeof PRICES;
const TOOL_PRICE = 2_000n; // µ per managed tool call (0.002)
const CHRONOS_FEE = 1_000n; // µ per Chronos run (0.001)
const OUTPUT_TOKENS = 12;

export interface CutFigures {
  streams: number;
  engines: Counters;
  recorded: Counters;
  usageCost: bigint;
  /** engines − recorded: never negative (never in the platform's favour). */
  unbilledPrompt: number;
  unbilledGeneration: number;
  /** unbilledGeneration per cut stream. */
  perStream: number;
}

export interface MeteringReport {
  calls: number;
  byKind: Record<string, number>;
  cutStreams: number;
  chronosRuns: number;
  toolCalls: number;
  /** The account whose calls all completed: its records against its engines. */
  completed: {
    engines: Counters;
    recorded: Counters;
    /** What the usage rows say the calls cost, the charges in the ledger, tokens × prices + fees. */
    usageCost: bigint;
    charged: bigint;
    expected: bigint;
  };
  /** Cut chat, text-completion and dedicated streams. */
  cut: CutFigures;
  /** Cut Responses streams (vLLM reports their usage only when they end). */
  cutResponses: CutFigures;
  /** The cut account's charges in the ledger (= both groups' usage cost). */
  cutCharged: bigint;
  seconds: number;
}

export type Kind = (typeof KINDS)[number];
const KINDS = [
  'chat',
  'chat-stream',
  'completion',
  'completion-stream',
  'responses',
  'responses-stream',
  'embeddings',
  'pinned',
  'olympus',
  'managed',
  'managed-stream',
  'dedicated',
  'dedicated-stream',
  'dedicated-by-model',
  'chronos',
] as const;
const STREAMED = new Set<Kind>([
  'chat-stream',
  'completion-stream',
  'responses-stream',
  'managed-stream',
  'dedicated-stream',
]);

/** A seeded generator, so a run can be repeated. */
function random(seed: number) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}

interface Account {
  id: string;
  inference: string;
  global: string;
  pinned?: string;
  endpoint: string;
}

export interface MeteringLoad {
  api: TestApi;
  run(
    calls: number,
    o?: { concurrency?: number; seed?: number; cutFraction?: number; kinds?: readonly Kind[] },
  ): Promise<MeteringReport>;
  close(): Promise<void>;
}

export async function startMeteringLoad(o: { itlMs?: number } = {}): Promise<MeteringLoad> {
  const itlMs = o.itlMs ?? 5;
  const dataDir = mkdtempSync(path.join(tmpdir(), 'berth-metering-'));
  const sim = (model: string) =>
    startEngineSim({ model, ttftMs: 0, itlMs, outputTokens: OUTPUT_TOKENS, maxModelLen: 1_000_000 });
  const [chat, tools, embed, cutChat, cutResponses, mcp] = await Promise.all([
    sim('org/chat'),
    sim('org/tools'),
    sim('org/embed'),
    sim('org/cut-chat'),
    sim('org/cut-responses'),
    startMcpServer(),
  ]);
  const sims: Record<Model, EngineSimHandle> = {
    chat,
    'tools-chat': tools,
    embed,
    'cut-chat': cutChat,
    'cut-responses': cutResponses,
  };
  const api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: dataDir,
    BERTH_LOCAL_ENGINE_ARGS: `--ttft-ms 0 --itl-ms ${itlMs} --output-tokens ${OUTPUT_TOKENS}`,
    BERTH_SECRETS_KEY: 'ef'.repeat(32),
    BILLING_FLUSH_INTERVAL_MS: '200',
    CHRONOS_RUN_FEE: '0.001',
  });
  const stop = async () => {
    await api.stop();
    await Promise.all([...Object.values(sims).map((s) => s.close()), mcp.close()]);
    rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    const admin = (p: string, body: unknown, method = 'PUT', headers: Record<string, string> = {}) =>
      api.admin(p, { method, body: JSON.stringify(body), headers });
    for (const [name, s] of Object.entries(sims)) {
      const [input, output] = PRICES[name as Model];
      const res = await admin(`/admin/models/${name}`, {
        kind: name === 'embed' ? 'embedding' : 'chat',
        backends: [{ baseUrl: s.url + '/v1', model: `org/${name === 'tools-chat' ? 'tools' : name}` }],
        pricing: { inputPerMTok: `${input}.00`, outputPerMTok: `${output}.00` },
      });
      if (res.status !== 201) throw new Error(`catalog ${name}: ${res.status} ${await res.text()}`);
    }
    const tool = await admin('/admin/tools/toolbox', {
      description: 'metering tools',
      url: mcp.url,
      price_per_call: '0.002',
    });
    if (tool.status !== 201) throw new Error(`tool: ${tool.status} ${await tool.text()}`);

    const call = (key: string, method: string, p: string, body?: unknown) =>
      fetch(api.url + p, {
        method,
        headers: { ...bearer(key), 'content-type': 'application/json' },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
    const account = async (): Promise<Account> => {
      const a = await api.newAccount();
      const credit = await admin(`/admin/accounts/${a.id}/credits`, { amount: '100000.00' }, 'POST', {
        'idempotency-key': randomUUID(),
      });
      if (credit.status !== 201) throw new Error(`credit: ${credit.status}`);
      for (const tool_id of ['toolbox', 'olympus', 'chronos'])
        if ((await call(a.global, 'POST', '/api/tools', { tool_id })).status !== 200)
          throw new Error(tool_id);
      const made = await call(a.compute, 'POST', '/api/endpoints', {
        model: 'Qwen/Qwen2.5-0.5B-Instruct',
        hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      });
      if (made.status !== 201) throw new Error(`endpoint: ${made.status} ${await made.text()}`);
      const endpoint = ((await made.json()) as { id: string }).id;
      return { id: a.id, inference: a.inference, global: a.global, endpoint };
    };
    const [full, cut] = [await account(), await account()];
    await eventually(
      async () => {
        for (const a of [full, cut]) {
          const e = await (await call(a.global, 'GET', `/api/endpoints/${a.endpoint}`)).json();
          if (e.status !== 'up' || !api.runtime?.backends.addresses(a.endpoint).length) return false;
        }
        return true;
      },
      { timeout: 60_000, interval: 250 },
    );
    const pinned = await call(full.global, 'POST', '/api/keys', {
      name: 'pinned',
      scope: 'inference',
      pinnedModel: 'chat',
    });
    full.pinned = ((await pinned.json()) as { value: string }).value;
    const policy = await call(full.global, 'PUT', '/api/olympus/policy', {
      allowed_models: ['chat'],
      objective: 'cost',
    });
    if (policy.status !== 200) throw new Error(`olympus policy: ${policy.status} ${await policy.text()}`);
    const run = await call(full.inference, 'POST', '/api/chronos/runs', {
      name: 'metering',
      schedule: '0 3 * * *',
      timezone: 'UTC',
      steps: [
        { type: 'chat', model: 'chat', messages: [{ role: 'user', content: 'Name a city' }], max_tokens: 6 },
        { type: 'tool', tool_id: 'toolbox', name: 'weather', input: { city: '{{steps.0.output}}' } },
        { type: 'chat', model: 'chat', messages: [{ role: 'user', content: 'Say more' }], max_tokens: 4 },
      ],
    });
    if (run.status !== 201) throw new Error(`chronos run: ${run.status} ${await run.text()}`);
    const runId = ((await run.json()) as { id: string }).id;

    const engineUrl = (a: Account) => api.runtime!.backends.addresses(a.endpoint)[0]!;
    // The engines of each group of calls: the completed calls' catalog engines (in PRICES order) and
    // dedicated engine; the cut streams' (chat, completions and dedicated); the cut Responses streams'.
    const groups = () => ({
      completed: [chat.url, tools.url, embed.url, engineUrl(full)],
      cut: [cutChat.url, engineUrl(cut)],
      cutResponses: [cutResponses.url],
    });
    const snapshot = async () => {
      const g = groups();
      return {
        completed: await Promise.all(g.completed.map(counters)),
        cut: await Promise.all(g.cut.map(counters)),
        cutResponses: await Promise.all(g.cutResponses.map(counters)),
      };
    };
    const recordsOf = async () => ({
      completed: await records(api.db.url, full.id, {}),
      cut: await records(api.db.url, cut.id, { notModel: 'cut-responses', endpoints: true }),
      cutResponses: await records(api.db.url, cut.id, { model: 'cut-responses' }),
    });

    /** One call of `kind`, by `a`; cut after `cutAt` chunks when given. Resolves when it ended. */
    const oneCall = async (kind: Kind, a: Account, cutAt?: number): Promise<void> => {
      const model = a === cut ? (kind.startsWith('responses') ? 'cut-responses' : 'cut-chat') : 'chat';
      const messages = [{ role: 'user', content: `Hello ${randomUUID()}` }];
      const managedPlan = 'Plan:\ncall add {"a": 2, "b": 3}';
      const requests: Record<Exclude<Kind, 'chronos'>, [string, Record<string, unknown>, string?]> = {
        chat: ['/api/chat/completions', { model, messages }],
        'chat-stream': [
          '/api/chat/completions',
          { model, messages, stream: true, stream_options: { include_usage: true } },
        ],
        completion: ['/api/completions', { model, prompt: 'Once upon' }],
        'completion-stream': ['/api/completions', { model, prompt: 'Once upon', stream: true }],
        responses: ['/api/responses', { model, input: 'Write' }],
        'responses-stream': ['/api/responses', { model, input: 'Write', stream: true }],
        embeddings: ['/api/embeddings', { model: 'embed', input: ['one text', 'another one'] }],
        pinned: ['/api/b/chat/completions', { model: 'ignored', messages }, full.pinned],
        olympus: ['/api/chat/completions', { model: 'auto', messages }],
        managed: [
          '/api/chat/completions',
          {
            model: 'tools-chat',
            messages: [{ role: 'user', content: managedPlan }],
            tools: [{ type: 'mcp', server_label: 'toolbox' }],
          },
        ],
        'managed-stream': [
          '/api/chat/completions',
          {
            model: 'tools-chat',
            messages: [{ role: 'user', content: managedPlan }],
            tools: [{ type: 'mcp', server_label: 'toolbox' }],
            stream: true,
          },
        ],
        dedicated: [
          `/api/d/${a.endpoint}/chat/completions`,
          { model: 'Qwen/Qwen2.5-0.5B-Instruct', messages },
        ],
        'dedicated-stream': [
          `/api/d/${a.endpoint}/chat/completions`,
          { model: 'Qwen/Qwen2.5-0.5B-Instruct', messages, stream: true },
        ],
        'dedicated-by-model': ['/api/chat/completions', { model: a.endpoint, messages }],
      };
      if (kind === 'chronos') {
        const res = await call(a.global, 'POST', `/api/chronos/runs/${runId}/trigger`);
        if (res.status !== 202) throw new Error(`chronos trigger: ${res.status} ${await res.text()}`);
        await res.arrayBuffer();
        return;
      }
      const [p, body, key] = requests[kind];
      const controller = new AbortController();
      const res = await fetch(api.url + p, {
        method: 'POST',
        headers: { ...bearer(key ?? a.inference), 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (res.status !== 200) throw new Error(`${kind}: ${res.status} ${await res.text()}`);
      if (cutAt === undefined) {
        await res.arrayBuffer();
        return;
      }
      // Read chunk by chunk; the client goes away after `cutAt` events.
      const reader = res.body!.getReader();
      let events = 0;
      let text = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        text += Buffer.from(value).toString();
        events += text.split('\n\n').length - 1;
        text = text.slice(text.lastIndexOf('\n\n') + 2);
        if (events >= cutAt) {
          controller.abort();
          await reader.cancel().catch(() => {});
          return;
        }
      }
    };

    return {
      api,
      async run(calls, r = {}) {
        const concurrency = r.concurrency ?? 16;
        const rnd = random(r.seed ?? 42);
        const cutFraction = r.cutFraction ?? 0.1;
        const before = await snapshot();
        const recordedBefore = await recordsOf();
        const mcpBefore = mcp.calls.length;
        const byKind: Record<string, number> = {};
        let cutStreams = 0;
        let cutResponsesStreams = 0;
        let chronosRuns = 0;
        let next = 0;
        const started = performance.now();
        await Promise.all(
          Array.from({ length: concurrency }, async () => {
            while (next < calls) {
              next++;
              const kinds = r.kinds ?? KINDS;
              const kind = kinds[Math.floor(rnd() * kinds.length)]!;
              const cutIt = STREAMED.has(kind) && kind !== 'managed-stream' && rnd() < cutFraction;
              byKind[kind] = (byKind[kind] ?? 0) + 1;
              if (kind === 'chronos') chronosRuns++;
              if (cutIt) {
                cutStreams++;
                if (kind === 'responses-stream') cutResponsesStreams++;
                await oneCall(kind, cut, 1 + Math.floor(rnd() * (OUTPUT_TOKENS - 2)));
              } else await oneCall(kind, full);
            }
          }),
        );
        const seconds = (performance.now() - started) / 1000;
        // Chronos runs finish on their own; cut streams' engines stop; then billing writes it all.
        await eventually(
          async () => {
            const [row] = await sql<{ n: number }>(
              api.db.url,
              `SELECT count(*)::int AS n FROM chronos_executions WHERE run_id = $1 AND status IN ('succeeded', 'failed')`,
              [runId],
            );
            return row!.n >= chronosRuns;
          },
          { timeout: 600_000, interval: 500 },
        );
        let last = '';
        await eventually(
          async () => {
            const now = JSON.stringify(await snapshot());
            const still = now === last;
            last = now;
            return still;
          },
          { timeout: 60_000, interval: 300 },
        );
        await api.billing.wallet.flush();
        await api.usage?.flush();
        const after = await snapshot();
        const recorded = await recordsOf();
        const engines = (g: keyof typeof after) => delta(before[g], after[g]);
        const rec = (g: keyof typeof recorded) => minus(recorded[g], recordedBefore[g]);
        const toolCalls = mcp.calls.length - mcpBefore;
        // Tokens × prices for the catalog engines (the dedicated engine is invoiced by GPU time).
        const catalog = (['chat', 'tools-chat', 'embed'] as const).reduce((total, m, i) => {
          const [input, output] = PRICES[m];
          const d = delta([before.completed[i]!], [after.completed[i]!]);
          return total + BigInt(d.prompt) * input + BigInt(d.generation) * output;
        }, 0n);
        const completed = rec('completed');
        const cutGroup = (g: 'cut' | 'cutResponses') => {
          const e = engines(g);
          const x = rec(g);
          const streams = g === 'cut' ? cutStreams - cutResponsesStreams : cutResponsesStreams;
          return {
            streams,
            engines: e,
            recorded: x.tokens,
            usageCost: x.usageCost,
            unbilledPrompt: e.prompt - x.tokens.prompt,
            unbilledGeneration: e.generation - x.tokens.generation,
            perStream: streams ? (e.generation - x.tokens.generation) / streams : 0,
          };
        };
        return {
          calls,
          byKind,
          cutStreams,
          chronosRuns,
          toolCalls,
          completed: {
            engines: engines('completed'),
            recorded: completed.tokens,
            usageCost: completed.usageCost,
            charged: completed.charged,
            expected: catalog + BigInt(toolCalls) * TOOL_PRICE + BigInt(chronosRuns) * CHRONOS_FEE,
          },
          cut: cutGroup('cut'),
          cutResponses: cutGroup('cutResponses'),
          cutCharged: rec('cut').charged,
          seconds,
        };
      },
      close: stop,
    };
  } catch (err) {
    // A setup that failed half-way leaves nothing running (the API's engine processes included).
    await stop().catch(() => {});
    throw err;
  }
}
