// `npm run bench routing`: the replica strategies (roundRobin, leastLoad, prefixAffinity) side by side
// in one run, through the real API (createApp, keys on PostgreSQL, the in-memory endpoint runtime of
// the proxy benchmark) to 4 engine simulators, each its own process with a prefix cache that holds
// about a third of the multi-turn workload's prompts and at most 4 sequences at once (the rest wait,
// as vLLM's --max-num-seqs makes them). Four workloads at a fixed arrival rate, each on its own
// simulators:
// - multi-turn chat: many conversations, each growing turn by turn (the client appends the answer and
//   a new question), turns of different conversations interleaved in a shuffled order;
// - shared system prompt: single-turn calls, one long system prompt, a different question each;
// - noisy neighbour: the shared-system-prompt calls, one of the 4 replicas 4× slower (TTFT, prefill
//   and ITL), as a replica sharing its GPU or node with something else is;
// - 220 KB prompts: single-turn calls, each one of 8 documents of about 220 KB and a question.
// Figures per strategy: client TTFT (first body byte of the stream) p50/p99, calls shed (any answer
// but a complete 200 stream), throughput, the engines' own prefix-cache hit ratio
// (vllm:prefix_cache_hits / queries) and the requests each replica served. The offered load is given
// as a share of the replicas' capacity: Σ slots / a call's service time with its prompt not cached
// (the least any strategy can have, so a strategy's real load is at most that). Each strategy runs
// ROUNDS times per workload, the order rotating by round, each run with its own questions; its
// figures pool its runs.
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { Agent, request } from 'undici';
import { DEFAULT_ROUTING_STRATEGY, type RoutingStrategy } from '@berth/crds';
import { spawnEngineSim, type SpawnedEngineSim } from '@berth/engine-sim';
import { BENCH_ENDPOINT_ID } from '../support/memory-runtime.ts';
import { createTestDatabase } from '../support/postgres.ts';
import { newKey, Proxy, stop } from './proxy.ts';
import { machine, summarize } from './stats.ts';
import { shuffled, words } from './workload.ts';

const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const REPLICAS = 4;
const CONVERSATIONS = env('BENCH_ROUTING_CONVERSATIONS', 121);
const TURNS = env('BENCH_ROUTING_TURNS', 6);
const SHARED_CALLS = env('BENCH_ROUTING_SHARED_CALLS', 480);
const RATE = env('BENCH_ROUTING_RATE', 30);
const NOISY_RATE = env('BENCH_ROUTING_NOISY_RATE', 40);
const LARGE_CALLS = env('BENCH_ROUTING_LARGE_CALLS', 240);
const LARGE_RATE = env('BENCH_ROUTING_LARGE_RATE', 4);
const LARGE_DOCUMENTS = 8;
/** Words of a large document: about 220 KB of text (each word one token in the simulator). */
const LARGE_WORDS = 21_000;
const SLOTS = env('BENCH_ROUTING_MAX_NUM_SEQS', 4);
const CACHE_BLOCKS = env('BENCH_ROUTING_CACHE_BLOCKS', 3000);
const SLOW = 4;
const STRATEGIES: RoutingStrategy[] = ['roundRobin', 'leastLoad', 'prefixAffinity'];
/**
 * Runs of each strategy per workload, the order rotating each round so each strategy goes first
 * once (with 480 calls a run, a p99 is its 5th-worst call: one run's tail moved 32–60 ms from run
 * to run, and the strategy run first after the warm-up had the worst in 3 of 4 runs).
 */
const ROUNDS = env('BENCH_ROUTING_ROUNDS', 3);

/** An engine simulator's timing: TTFT = ttft + prefill per prompt token not in the prefix cache. */
interface Timing {
  ttftMs: number;
  prefillMsPerToken: number;
  itlMs: number;
}
const FAST: Timing = { ttftMs: 15, prefillMsPerToken: 0.1, itlMs: 3 };
const SLOWED: Timing = { ttftMs: FAST.ttftMs * SLOW, prefillMsPerToken: 0.4, itlMs: FAST.itlMs * SLOW };
const OUTPUT_TOKENS = 32;

const simArgs = (t: Timing) => [
  ...['--served-model-name', 'berth/bench', '--max-model-len', '65536'],
  ...['--ttft-ms', String(t.ttftMs), '--prefill-ms-per-token', String(t.prefillMsPerToken)],
  ...['--itl-ms', String(t.itlMs), '--output-tokens', String(OUTPUT_TOKENS)],
  ...['--prefix-cache-blocks', String(CACHE_BLOCKS), '--max-num-seqs', String(SLOTS)],
];

/** Seconds one call holds a slot with `promptTokens` not cached. */
const service = (t: Timing, promptTokens: number) =>
  (t.ttftMs + t.prefillMsPerToken * promptTokens + t.itlMs * (OUTPUT_TOKENS - 1)) / 1000;

type Message = { role: 'system' | 'user' | 'assistant'; content: string };

interface Call {
  ttftMs: number;
  text: string;
  ok: boolean;
}

async function stream(base: string, auth: Record<string, string>, agent: Agent, messages: Message[]) {
  const t0 = performance.now();
  const res = await request(`${base}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify({ model: 'berth/bench', messages, max_tokens: OUTPUT_TOKENS, stream: true }),
    dispatcher: agent,
    headersTimeout: 120_000,
    bodyTimeout: 120_000,
  });
  let first = 0;
  let raw = '';
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    if (!first) first = performance.now();
    raw += chunk.toString('utf8');
  }
  let text = '';
  for (const line of raw.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    text +=
      (JSON.parse(line.slice(6)) as { choices: { delta?: { content?: string } }[] }).choices[0]?.delta
        ?.content ?? '';
  }
  if (res.statusCode !== 200 || !raw.endsWith('data: [DONE]\n\n'))
    throw new Error(`HTTP ${res.statusCode}: ${raw.slice(0, 300)}`);
  return { ttftMs: first - t0, text, ok: true };
}

/** Sums every sample of the named counters, per simulator. */
async function counters(sims: SpawnedEngineSim[]) {
  return Promise.all(
    sims.map(async (s) => {
      const text = await (await request(`${s.url}/metrics`)).body.text();
      const sum = (name: string) =>
        text
          .split('\n')
          .filter((l) => l.startsWith(name + '{') || l.startsWith(name + ' '))
          .reduce((a, l) => a + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
      return {
        hits: sum('vllm:prefix_cache_hits_total'),
        queries: sum('vllm:prefix_cache_queries_total'),
        requests: sum('vllm:request_success_total'),
      };
    }),
  );
}

/** Fires `send(i)` at `rate` per second for i < n; resolves with every call's outcome. */
async function atFixedRate(n: number, rate: number, send: (i: number) => Promise<Call>): Promise<Call[]> {
  const start = performance.now();
  const calls: Promise<Call>[] = [];
  let failed = 0;
  for (let i = 0; i < n; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    calls.push(
      send(i).catch((err: Error) => {
        if (!failed++) console.error(`routing bench: a call failed: ${err.message}`);
        return { ttftMs: NaN, text: '', ok: false };
      }),
    );
  }
  return Promise.all(calls);
}

interface Outcome {
  strategy: RoutingStrategy;
  ttft: ReturnType<typeof summarize>;
  ok: number;
  n: number;
  seconds: number;
  hitRatio: number;
  perReplica: number[];
}

/** One run of a strategy: its answered calls' TTFTs and the engines' counters over it. */
interface Run {
  ttfts: number[];
  ok: number;
  n: number;
  seconds: number;
  hits: number;
  queries: number;
  perReplica: number[];
}

/** A strategy's runs (all rounds) as one outcome: TTFTs pooled, counters summed. */
function pooled(strategy: RoutingStrategy, runs: Run[]): Outcome {
  const sum = (f: (r: Run) => number) => runs.reduce((a, r) => a + f(r), 0);
  return {
    strategy,
    ttft: summarize(runs.flatMap((r) => r.ttfts)),
    ok: sum((r) => r.ok),
    n: sum((r) => r.n),
    seconds: sum((r) => r.seconds),
    hitRatio: sum((r) => r.hits) / sum((r) => r.queries),
    perReplica: runs[0]!.perReplica.map((_, i) => sum((r) => r.perReplica[i]!)),
  };
}

interface Workload {
  name: string;
  title: string;
  timings: Timing[];
  rate: number;
  calls: number;
  /** Calls a second the replicas serve with no prompt cached (Σ slots / service time). */
  capacity: number;
  /**
   * A fresh sender for one strategy's run: its own conversations and questions (`tag` names the
   * run, so no run's keys were seen by an earlier one); the 220 KB documents are the same each run.
   */
  sender(ctx: {
    base: string;
    auth: Record<string, string>;
    agent: Agent;
    tag: string;
  }): (i: number) => Promise<Call>;
}

const f = (x: number, d = 1) => x.toFixed(d);

const HEADER = [
  '| workload (load) | strategy | TTFT p50 | TTFT p99 | vs roundRobin: p50 / p99 | shed | prefix-cache hits | calls/s | requests per replica |',
  '|---|---|---|---|---|---|---|---|---|',
];

function rowsOf(w: Workload, rows: Outcome[]): string[] {
  const rr = rows.find((r) => r.strategy === 'roundRobin')!;
  return rows.map(
    (r) =>
      `| ${w.name} (${f((100 * w.rate) / w.capacity, 0)} %) | ${r.strategy} | ${f(r.ttft.p50)} ms | ${f(r.ttft.p99)} ms | ${f(rr.ttft.p50 / r.ttft.p50, 2)}× / ${f(rr.ttft.p99 / r.ttft.p99, 2)}× | ${r.n - r.ok} of ${r.n} | ${f(100 * r.hitRatio)} % | ${f(r.n / r.seconds)} | ${r.perReplica.join(' / ')} |`,
  );
}

function workloads(): Workload[] {
  const system: Message = { role: 'system', content: words(40, 'sys') };
  // Mean prompt of a multi-turn call: 340 tokens, +182 a turn.
  const turnTokens = 340 + (182 * (TURNS - 1)) / 2;
  const longSystem: Message = { role: 'system', content: words(1000, 'shared') };
  const documents = Array.from({ length: LARGE_DOCUMENTS }, (_, d) => words(LARGE_WORDS, `doc${d}`));
  // Which document each call asks about: seeded, the same for every strategy (not in turn, which
  // would line the documents up with roundRobin's rotation).
  const asks = shuffled(LARGE_CALLS, 7).map((x) => x % LARGE_DOCUMENTS);
  const cap = (timings: Timing[], tokens: number) =>
    timings.reduce((a, t) => a + SLOTS / service(t, tokens), 0);
  const fast = Array<Timing>(REPLICAS).fill(FAST);
  const noisy = [SLOWED, ...Array<Timing>(REPLICAS - 1).fill(FAST)];
  const shared = (w: Omit<Workload, 'sender' | 'calls'>): Workload => ({
    ...w,
    calls: SHARED_CALLS,
    sender:
      ({ base, auth, agent, tag }) =>
      (i) =>
        stream(base, auth, agent, [longSystem, { role: 'user', content: words(40, `${tag}q${i}`) }]),
  });
  return [
    {
      name: 'multi-turn',
      title: `multi-turn chat: ${CONVERSATIONS} conversations × ${TURNS} turns (40-token system prompt, 300-token first question, +32-token answer and 150-token question a turn), turns interleaved in shuffled order`,
      timings: fast,
      rate: RATE,
      calls: CONVERSATIONS * TURNS,
      capacity: cap(fast, turnTokens),
      sender({ base, auth, agent, tag }) {
        const conversations = Array.from({ length: CONVERSATIONS }, (_, c) => ({
          messages: [system, { role: 'user', content: words(300, `${tag}c${c}t0`) }] as Message[],
          turn: 0,
          pending: Promise.resolve() as Promise<unknown>,
        }));
        const order = Array.from({ length: TURNS }, (_, t) => shuffled(CONVERSATIONS, t + 1)).flat();
        return (i) => {
          const c = conversations[order[i]!]!;
          // The next turn waits for the previous answer (at this rate it is long there).
          const call = c.pending.then(async () => {
            const r = await stream(base, auth, agent, c.messages);
            c.turn++;
            c.messages = [
              ...c.messages,
              { role: 'assistant', content: r.text },
              { role: 'user', content: words(150, `${tag}c${order[i]}t${c.turn}`) },
            ];
            return r;
          });
          c.pending = call.catch(() => {});
          return call;
        };
      },
    },
    shared({
      name: 'shared',
      title: `shared system prompt: ${SHARED_CALLS} single-turn calls, one 1,000-token system prompt, a different 40-token question each`,
      timings: fast,
      rate: RATE,
      capacity: cap(fast, 1040),
    }),
    shared({
      name: 'noisy',
      title: `noisy neighbour: the shared-system-prompt calls, one replica ${SLOW}× slower (TTFT ${SLOWED.ttftMs} ms + ${SLOWED.prefillMsPerToken} ms per uncached token, ITL ${SLOWED.itlMs} ms; listed first)`,
      timings: noisy,
      rate: NOISY_RATE,
      capacity: cap(noisy, 1040),
    }),
    {
      name: '220KB',
      title: `220 KB prompts: ${LARGE_CALLS} single-turn calls, each one of ${LARGE_DOCUMENTS} documents (${f(Buffer.byteLength(documents[0]!) / 1024, 0)} KB, ${LARGE_WORDS.toLocaleString('en')} tokens; one at random, seeded) and a different 40-token question`,
      timings: fast,
      rate: LARGE_RATE,
      calls: LARGE_CALLS,
      capacity: cap(fast, LARGE_WORDS + 40),
      sender:
        ({ base, auth, agent, tag }) =>
        (i) =>
          stream(base, auth, agent, [
            { role: 'user', content: `${documents[asks[i]!]}\n\n${words(40, `${tag}q${i}`)}` },
          ]),
    },
  ];
}

export async function benchRouting(): Promise<string> {
  const load = os.loadavg();
  const only = process.env.BENCH_ROUTING_WORKLOADS?.split(',');
  const db = await createTestDatabase('routing');
  let sims: SpawnedEngineSim[] = [];
  let berth: Proxy | undefined;
  const agent = new Agent({ connections: null, keepAliveTimeout: 60_000 });
  const out: string[] = [];
  const results = new Map<string, Outcome[]>();
  try {
    berth = await Proxy.start('berth', { DATABASE_URL: db.url, LOG_LEVEL: 'warn' });
    const { account, key } = await newKey(berth);
    const auth = { authorization: `Bearer ${key}` };
    const base = `${berth.url}/api/d/${BENCH_ENDPOINT_ID}`;
    const ctx = { base, auth, agent };

    const run = async (
      strategy: RoutingStrategy,
      rate: number,
      n: number,
      send: (i: number) => Promise<Call>,
    ) => {
      await berth!.ask({ type: 'endpoint', account, phase: 'up', routing: strategy });
      await Promise.all(sims.map((s) => request(`${s.url}/reset_prefix_cache`, { method: 'POST' })));
      const before = await counters(sims);
      const t0 = performance.now();
      const calls = await atFixedRate(n, rate, send);
      const seconds = (performance.now() - t0) / 1000;
      const after = await counters(sims);
      const d = after.map((a, i) => ({
        hits: a.hits - before[i]!.hits,
        queries: a.queries - before[i]!.queries,
        requests: a.requests - before[i]!.requests,
      }));
      return {
        ttfts: calls.filter((c) => c.ok).map((c) => c.ttftMs),
        ok: calls.filter((c) => c.ok).length,
        n,
        seconds,
        hits: d.reduce((a, x) => a + x.hits, 0),
        queries: d.reduce((a, x) => a + x.queries, 0),
        perReplica: d.map((x) => x.requests),
      } satisfies Run;
    };

    const listed = workloads().filter((w) => !only || only.includes(w.name));
    for (const w of listed) {
      sims = [];
      for (const t of w.timings) sims.push(await spawnEngineSim(simArgs(t)));
      await berth.ask({ type: 'addresses', addresses: sims.map((s) => s.url) });
      // Warm-up of these simulators: JIT, connections, the key cache.
      await run('leastLoad', 40, 40, (i) =>
        stream(base, auth, agent, [{ role: 'user', content: words(20, `warm${i}`) }]),
      );
      const runs = new Map<RoutingStrategy, Run[]>(STRATEGIES.map((st) => [st, []]));
      for (let round = 0; round < ROUNDS; round++)
        for (let k = 0; k < STRATEGIES.length; k++) {
          const strategy = STRATEGIES[(k + round) % STRATEGIES.length]!;
          const tag = `r${round}${strategy}`;
          runs.get(strategy)!.push(await run(strategy, w.rate, w.calls, w.sender({ ...ctx, tag })));
        }
      const rows = STRATEGIES.map((st) => pooled(st, runs.get(st)!));
      results.set(w.name, rows);
      out.push(...rowsOf(w, rows));
      console.error(rowsOf(w, rows).join('\n')); // progress: a long run's rows as they come
      for (const s of sims) await stop(s.child);
      sims = [];
    }

    const verdicts: string[] = [];
    const def = DEFAULT_ROUTING_STRATEGY;
    for (const w of listed) {
      const rows = results.get(w.name);
      if (!rows) continue;
      const d = rows.find((r) => r.strategy === def)!;
      const rr = rows.find((r) => r.strategy === 'roundRobin')!;
      verdicts.push(
        `| ${w.name}: ${def} TTFT p99 ≤ roundRobin's | ${f(d.ttft.p99)} vs ${f(rr.ttft.p99)} ms | ${d.ttft.p99 <= rr.ttft.p99 ? '**met**' : '**not met**'} |`,
      );
      if (w.name === 'multi-turn') {
        const speedup = rr.ttft.p50 / d.ttft.p50;
        verdicts.push(
          `| multi-turn: ${def} TTFT p50 ≥ 2× better than roundRobin's | ${f(speedup, 2)}× (${f(rr.ttft.p50)} → ${f(d.ttft.p50)} ms) | ${speedup >= 2 ? '**met**' : '**not met**'} |`,
        );
      }
      if (w.rate / w.capacity < 0.8)
        verdicts.push(
          `| ${w.name} (${f((100 * w.rate) / w.capacity, 0)} % of capacity): no call shed | ${d.n - d.ok} of ${d.n} | ${d.ok === d.n ? '**met**' : '**not met**'} |`,
        );
    }
    return [
      `### Result (${new Date().toISOString().slice(0, 10)}, ${machine()}, load average at start ${load.map((x) => x.toFixed(2)).join(' / ')})`,
      '',
      `${REPLICAS} simulators (each: TTFT ${FAST.ttftMs} ms + ${FAST.prefillMsPerToken} ms per uncached prompt token, ITL ${FAST.itlMs} ms, ${OUTPUT_TOKENS} tokens, at most ${SLOTS} sequences at once, prefix cache ${CACHE_BLOCKS} blocks of 16 tokens), streaming chat through \`/api/d/{id}\`. Default strategy: \`${def}\`. Each strategy ran ${ROUNDS} time${ROUNDS === 1 ? '' : 's'} per workload, in rounds whose order rotates (each goes first once); figures pool its runs (TTFTs, counters, calls). Load: the arrival rate as a share of the replicas' capacity with no prompt cached. Shed: calls not answered with a complete 200 stream. Workloads:`,
      '',
      ...listed.map(
        (w) =>
          `- ${w.title}; ${w.rate} calls/s = ${f((100 * w.rate) / w.capacity, 0)} % of ${f(w.capacity)} calls/s.`,
      ),
      '',
      ...HEADER,
      ...out,
      '',
      '| target | measured | verdict |',
      '|---|---|---|',
      ...verdicts,
    ].join('\n');
  } finally {
    await berth?.stop();
    for (const s of sims) await stop(s.child);
    await agent.close();
    await db.drop();
  }
}
