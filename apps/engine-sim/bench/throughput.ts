// Benchmark of the engine simulator: concurrent streams at realistic latency, and raw token throughput
// at zero latency. The simulator runs as its own process (the CLI, as the operator starts it); this
// process is the load generator. All traffic goes to 127.0.0.1; every loop is bounded in count and time.
//
//   node --import tsx apps/engine-sim/bench/throughput.ts [--quick]

import { readFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { spawnEngineSim, type SpawnedEngineSim } from '../src/spawn.ts';

const quick = process.argv.includes('--quick');
const CLK_TCK = 100; // Linux USER_HZ

type Sim = SpawnedEngineSim;
const startSim = (args: string[]) => spawnEngineSim(args, 20_000);
const stopSim = (sim: Sim) => sim.stop();

/** CPU seconds (user + system) the process has used so far, from /proc. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /VmHWM:\s+(\d+) kB/.exec(status);
  return m ? Number(m[1]) / 1024 : NaN;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });

interface StreamResult {
  ok: boolean;
  ttftMs: number;
  totalMs: number;
  bytes: number;
}

function stream(url: string, body: string): Promise<StreamResult> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    let first = 0;
    let bytes = 0;
    let tail = '';
    const req = http.request(
      url + '/v1/chat/completions',
      { method: 'POST', agent, headers: { 'content-type': 'application/json' } },
      (res) => {
        res.on('data', (c: Buffer) => {
          if (first === 0) first = performance.now();
          bytes += c.length;
          tail = (tail + c.toString('latin1', Math.max(0, c.length - 32))).slice(-32);
        });
        res.on('end', () =>
          resolve({
            ok: res.statusCode === 200 && tail.endsWith('data: [DONE]\n\n'),
            ttftMs: first - t0,
            totalMs: performance.now() - t0,
            bytes,
          }),
        );
        res.on('error', () => resolve({ ok: false, ttftMs: 0, totalMs: 0, bytes }));
      },
    );
    req.setTimeout(120_000, () => req.destroy());
    req.on('error', () => resolve({ ok: false, ttftMs: 0, totalMs: 0, bytes }));
    req.end(body);
  });
}

/** Mean TTFT and ITL as the simulator itself measured them (its vLLM histograms). */
async function serverLatency(url: string): Promise<{ ttftMs: number; itlMs: number }> {
  const text = await new Promise<string>((resolve, reject) => {
    http
      .get(url + '/metrics', { agent }, (res) => {
        let b = '';
        res.setEncoding('utf8').on('data', (c: string) => (b += c));
        res.on('end', () => resolve(b));
      })
      .on('error', reject);
  });
  const v = (name: string) => Number(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return {
    ttftMs: (1000 * v('vllm:time_to_first_token_seconds_sum')) / v('vllm:time_to_first_token_seconds_count'),
    itlMs: (1000 * v('vllm:inter_token_latency_seconds_sum')) / v('vllm:inter_token_latency_seconds_count'),
  };
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

const f1 = (n: number) => n.toFixed(1);
const f0 = (n: number) => n.toFixed(0);

function chatBody(tokens: number, i: number): string {
  return JSON.stringify({
    model: 'bench',
    messages: [{ role: 'user', content: `benchmark request number ${i}` }],
    max_tokens: tokens,
    ignore_eos: true,
    stream: true,
    stream_options: { include_usage: true },
  });
}

/** N concurrent streams with realistic TTFT/ITL: does the simulator hold the schedule? */
async function concurrent(n: number, tokens: number, ttftMs: number, itlMs: number): Promise<string> {
  const sim = await startSim([
    '--ttft-ms',
    String(ttftMs),
    '--itl-ms',
    String(itlMs),
    '--max-num-seqs',
    String(n * 2),
  ]);
  try {
    const pid = sim.child.pid!;
    const cpu0 = cpuSeconds(pid);
    const t0 = performance.now();
    const results = await Promise.all(
      Array.from({ length: n }, (_, i) => stream(sim.url, chatBody(tokens, i))),
    );
    const wall = (performance.now() - t0) / 1000;
    const cpu = cpuSeconds(pid) - cpu0;
    const server = await serverLatency(sim.url);
    const ok = results.filter((r) => r.ok);
    const ideal = ttftMs + (tokens - 1) * itlMs;
    const totals = ok.map((r) => r.totalMs);
    const ttfts = ok.map((r) => r.ttftMs);
    return (
      `| ${n} | ${tokens} | ${ttftMs} / ${itlMs} | ${ok.length}/${n} | ${f0(ideal)} | ${f0(pct(totals, 50))} / ${f0(pct(totals, 99))} | ` +
      `${f0(pct(ttfts, 50))} / ${f0(pct(ttfts, 99))} | ${f0(server.ttftMs)} / ${f1(server.itlMs)} | ${f0((ok.length * tokens) / wall)} | ${f1(wall)} | ${f1(cpu)} (${f0((100 * cpu) / wall)} %) | ${f0(rssMiB(pid))} |`
    );
  } finally {
    await stopSim(sim);
  }
}

/** Zero latency knobs: how many tokens per second one simulator process (one core) can emit. */
async function zeroLatency(parallel: number, tokens: number, rounds: number): Promise<string> {
  const sim = await startSim(['--ttft-ms', '0', '--itl-ms', '0', '--max-num-seqs', String(parallel * 2)]);
  try {
    const pid = sim.child.pid!;
    // warm-up
    await Promise.all(Array.from({ length: parallel }, (_, i) => stream(sim.url, chatBody(64, i))));
    const cpu0 = cpuSeconds(pid);
    const t0 = performance.now();
    let ok = 0;
    let bytes = 0;
    const deadline = t0 + 60_000;
    for (let r = 0; r < rounds && performance.now() < deadline; r++) {
      const results = await Promise.all(
        Array.from({ length: parallel }, (_, i) => stream(sim.url, chatBody(tokens, r * parallel + i))),
      );
      for (const x of results) {
        if (x.ok) ok++;
        bytes += x.bytes;
      }
    }
    const wall = (performance.now() - t0) / 1000;
    const cpu = cpuSeconds(pid) - cpu0;
    const totalTokens = ok * tokens;
    return (
      `| ${parallel} | ${tokens} | ${ok} | ${f0(totalTokens / wall)} | ${f0(totalTokens / cpu)} | ` +
      `${f1((cpu * 1e6) / totalTokens)} | ${f1(bytes / wall / 1024 / 1024)} | ${f1(wall)} | ${f1(cpu)} |`
    );
  } finally {
    await stopSim(sim);
  }
}

async function main(): Promise<void> {
  const lines: string[] = [];
  const log = (s: string) => {
    lines.push(s);
    process.stdout.write(s + '\n');
  };
  log(
    `node ${process.version}, ${os.cpus().length} vCPU (${os.cpus()[0]?.model ?? '?'}), load average before: ${os.loadavg().map(f1).join(' ')}`,
  );
  log('');
  log('Concurrent streams (simulator: one process; client: this process)');
  log('');
  log(
    '| streams | tokens each | TTFT / ITL ms | complete | ideal ms | stream ms p50 / p99 | first byte ms p50 / p99 | sim-side mean TTFT / ITL ms | tokens/s | wall s | sim CPU s | sim peak RSS MiB |',
  );
  log('|---|---|---|---|---|---|---|---|---|---|---|---|');
  const sizes = quick ? [200] : [1000, 2000];
  for (const n of sizes) log(await concurrent(n, 100, 100, 20));
  log('');
  log('Zero latency knobs (TTFT 0, ITL 0): token throughput of one simulator process');
  log('');
  log(
    '| parallel streams | tokens each | streams done | tokens/s (wall) | tokens per sim CPU-second | sim CPU µs/token | MiB/s | wall s | sim CPU s |',
  );
  log('|---|---|---|---|---|---|---|---|---|');
  log(await zeroLatency(quick ? 8 : 32, 4000, quick ? 2 : 20));
  log(await zeroLatency(quick ? 8 : 256, 200, quick ? 2 : 40));
  agent.destroy();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
