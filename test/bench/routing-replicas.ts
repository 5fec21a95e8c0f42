// `npm run bench routing-replicas`: leastLoad behind two API replicas, with and without the engines'
// own load (ENGINE_LOAD_SAMPLE_MS; apps/api/src/upstream/engine-load.ts), in one run. Two Berth
// processes (the proxy benchmark's proxy-server.ts: the real app, keys on one PostgreSQL, the in-memory
// runtime) serve one leastLoad endpoint on the same 4 engine simulators; each call goes to one of the
// two at random (seeded), as a Service spreads connections. Each API replica balances only the calls
// it sees unless it reads the engines' vllm:num_requests_running / waiting. The simulators run few
// sequences at once (--max-num-seqs), so a replica given more than its share makes calls wait for a
// slot: TTFT (client, first body byte of the stream) shows the imbalance. Conditions alternate over
// rounds on the same seeded traffic.
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { Agent, request } from 'undici';
import { spawnEngineSim, type SpawnedEngineSim } from '@berth/engine-sim';
import { BENCH_ENDPOINT_ID } from '../support/memory-runtime.ts';
import { createTestDatabase } from '../support/postgres.ts';
import { newKey, Proxy, stop } from './proxy.ts';
import { machine, summarize } from './stats.ts';
import { words } from './workload.ts';

const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const REPLICAS = 4;
const RATE = env('BENCH_REPLICAS_RATE', 7);
const SECONDS = env('BENCH_REPLICAS_SECONDS', 60);
const ROUNDS = env('BENCH_REPLICAS_ROUNDS', 2);
const MAX_NUM_SEQS = env('BENCH_REPLICAS_MAX_NUM_SEQS', 4);
const ITL_MS = 10;
/** The simulators: TTFT 20 ms, ITL 10 ms, up to 512 tokens (each call asks for 16–512). */
const SIM_ARGS = [
  ...['--served-model-name', 'berth/bench', '--ttft-ms', '20', '--itl-ms', String(ITL_MS)],
  ...['--output-tokens', '512', '--max-num-seqs', String(MAX_NUM_SEQS), '--max-model-len', '8192'],
];
const CONDITIONS = [
  { name: 'own counts only (ENGINE_LOAD_SAMPLE_MS=0)', sample: '0' },
  { name: 'engine-corrected (ENGINE_LOAD_SAMPLE_MS=1000)', sample: '1000' },
  { name: 'engine-corrected (ENGINE_LOAD_SAMPLE_MS=250, the default)', sample: '250' },
];

/** A seeded generator (LCG), the same sequence for every condition. */
function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s / 2 ** 32;
  };
}

interface Call {
  api: number;
  maxTokens: number;
  prompt: string;
}

function traffic(n: number): Call[] {
  const r = rng(19);
  return Array.from({ length: n }, (_, i) => ({
    api: r() < 0.5 ? 0 : 1,
    // long-tailed lengths, as chat answers are: mostly short, some long
    maxTokens: Math.round(16 + 496 * r() ** 2),
    prompt: words(20, `q${i}`),
  }));
}

async function streamCall(base: string, auth: Record<string, string>, agent: Agent, c: Call) {
  const t0 = performance.now();
  const res = await request(`${base}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify({
      model: 'berth/bench',
      messages: [{ role: 'user', content: c.prompt }],
      max_tokens: c.maxTokens,
      ignore_eos: true,
      stream: true,
    }),
    dispatcher: agent,
    headersTimeout: 120_000,
    bodyTimeout: 120_000,
  });
  let first = 0;
  let tail = '';
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    if (!first) first = performance.now();
    tail = (tail + chunk.toString('utf8')).slice(-64);
  }
  if (res.statusCode !== 200 || !tail.endsWith('data: [DONE]\n\n')) throw new Error(`HTTP ${res.statusCode}`);
  return first - t0;
}

/** running + waiting of every simulator, and its answered requests. */
async function engineState(sims: SpawnedEngineSim[], agent: Agent) {
  return Promise.all(
    sims.map(async (s) => {
      const text = await (await request(`${s.url}/metrics`, { dispatcher: agent })).body.text();
      const sum = (name: string) =>
        text
          .split('\n')
          .filter((l) => l.startsWith(name + '{') || l.startsWith(name + ' '))
          .reduce((a, l) => a + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
      return {
        inFlight: sum('vllm:num_requests_running') + sum('vllm:num_requests_waiting'),
        waiting: sum('vllm:num_requests_waiting'),
        answered: sum('vllm:request_success_total'),
      };
    }),
  );
}

interface Outcome {
  name: string;
  ttft: ReturnType<typeof summarize>;
  ok: number;
  n: number;
  perReplica: number[];
  /** Time-averaged running + waiting per replica (polled every 100 ms). */
  meanInFlight: number[];
  /** Mean over polls of (busiest replica's in-flight) / (mean in-flight). */
  busiestOverMean: number;
  /** Share of polls in which some replica had calls waiting for a slot while another had a free one. */
  strandedShare: number;
}

const f = (x: number, d = 1) => x.toFixed(d);

export async function benchRoutingReplicas(): Promise<string> {
  const load = os.loadavg();
  const db = await createTestDatabase('routing_replicas');
  const sims: SpawnedEngineSim[] = [];
  const apis: Proxy[][] = [];
  const agent = new Agent({ connections: null, keepAliveTimeout: 60_000 });
  const poller = new Agent({ connections: 1, keepAliveTimeout: 60_000 });
  let failed = 0;
  try {
    for (let i = 0; i < REPLICAS; i++) sims.push(await spawnEngineSim(SIM_ARGS));
    for (const c of CONDITIONS) {
      const pair: Proxy[] = [];
      for (let k = 0; k < 2; k++)
        pair.push(
          await Proxy.start(
            'berth',
            { DATABASE_URL: db.url, LOG_LEVEL: 'warn', ENGINE_LOAD_SAMPLE_MS: c.sample },
            `berth-${c.sample}-${k}`,
          ),
        );
      apis.push(pair);
    }
    const { account, key } = await newKey(apis[0]![0]!);
    const auth = { authorization: `Bearer ${key}` };
    for (const pair of apis)
      for (const p of pair) {
        await p.ask({ type: 'endpoint', account, phase: 'up', routing: 'leastLoad' });
        await p.ask({ type: 'addresses', addresses: sims.map((s) => s.url) });
      }
    const calls = traffic(Math.round(RATE * SECONDS));

    const run = async (ci: number, list: Call[]): Promise<Outcome> => {
      const pair = apis[ci]!;
      const bases = pair.map((p) => `${p.url}/api/d/${BENCH_ENDPOINT_ID}`);
      const before = await engineState(sims, poller);
      const polls: number[][] = [];
      let stranded = 0;
      let polling = true;
      const poll = (async () => {
        while (polling) {
          const s = await engineState(sims, poller);
          const inFlight = s.map((x) => x.inFlight);
          polls.push(inFlight);
          if (s.some((x) => x.waiting > 0) && inFlight.some((x) => x < MAX_NUM_SEQS)) stranded++;
          await new Promise((r) => setTimeout(r, 100));
        }
      })();
      const start = performance.now();
      const pending: Promise<number>[] = [];
      for (let i = 0; i < list.length; i++) {
        const wait = start + (i * 1000) / RATE - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const c = list[i]!;
        pending.push(
          streamCall(bases[c.api]!, auth, agent, c).catch((err: Error) => {
            if (!failed++) process.stderr.write(`routing-replicas: a call failed: ${err.message}\n`);
            return NaN;
          }),
        );
      }
      const ttfts = await Promise.all(pending);
      polling = false;
      await poll;
      const after = await engineState(sims, poller);
      const busy = polls.filter((p) => p.some((x) => x > 0));
      const ok = ttfts.filter((x) => !Number.isNaN(x));
      return {
        name: CONDITIONS[ci]!.name,
        ttft: summarize(ok),
        ok: ok.length,
        n: list.length,
        perReplica: after.map((a, i) => a.answered - before[i]!.answered),
        meanInFlight: sims.map((_, i) => polls.reduce((a, p) => a + p[i]!, 0) / polls.length),
        busiestOverMean:
          busy.reduce((a, p) => a + Math.max(...p) / (p.reduce((x, y) => x + y, 0) / p.length), 0) /
          busy.length,
        strandedShare: stranded / polls.length,
      };
    };

    // Warm-up: JIT, connections, key caches, on both pairs.
    const warm = traffic(40).map((c) => ({ ...c, maxTokens: 16 }));
    for (let ci = 0; ci < CONDITIONS.length; ci++) await run(ci, warm);

    const results: Outcome[][] = CONDITIONS.map(() => []);
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 ? [...CONDITIONS.keys()].reverse() : [...CONDITIONS.keys()];
      // (one process pair per condition: an idle pair stops sampling 30 s after its last call)
      for (const ci of order) results[ci]!.push(await run(ci, calls));
    }

    const rows = results.flat();
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const off = results[0]!;
    const ratios = results.slice(1).map((on, i) => {
      const p50 = mean(off.map((r) => r.ttft.p50)) / mean(on.map((r) => r.ttft.p50));
      const p99 = mean(off.map((r) => r.ttft.p99)) / mean(on.map((r) => r.ttft.p99));
      return `${CONDITIONS[i + 1]!.sample} ms: TTFT p50 ${f(p50, 2)}×, p99 ${f(p99, 2)}×`;
    });
    return [
      `### Two API replicas (${new Date().toISOString().slice(0, 10)}, ${machine()}, load average at start ${load.map((x) => x.toFixed(1)).join(' / ')})`,
      '',
      `${REPLICAS} simulators (each: TTFT 20 ms, ITL ${ITL_MS} ms, at most ${MAX_NUM_SEQS} sequences at once, the rest wait), two Berth processes per condition on one PostgreSQL, one \`leastLoad\` endpoint; ${calls.length} streaming calls at ${RATE}/s, each to one API replica at random (seeded), asking for 16–512 tokens (long-tailed, mean ≈ ${f(mean(calls.map((c) => c.maxTokens)), 0)}), the same traffic for both conditions; ${ROUNDS} round(s), conditions alternating.`,
      '',
      '| condition | TTFT p50 | TTFT p99 | TTFT mean | complete | requests per replica | time-averaged in flight per replica | busiest / mean (polled) | polls with a call waiting while a slot is free |',
      '|---|---|---|---|---|---|---|---|---|',
      ...rows.map(
        (r) =>
          `| ${r.name} | ${f(r.ttft.p50)} ms | ${f(r.ttft.p99)} ms | ${f(r.ttft.mean)} ms | ${r.ok}/${r.n} | ${r.perReplica.join(' / ')} | ${r.meanInFlight.map((x) => f(x, 2)).join(' / ')} | ${f(r.busiestOverMean, 2)}× | ${f(100 * r.strandedShare)} % |`,
      ),
      '',
      `Own counts only against engine-corrected at ${ratios.join('; at ')} (means over rounds; above 1: the correction is faster).`,
    ].join('\n');
  } finally {
    for (const pair of apis) for (const p of pair) await p.stop();
    for (const s of sims) await stop(s.child);
    await agent.close();
    await poller.close();
    await db.drop();
  }
}
