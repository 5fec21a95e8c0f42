// `npm run bench metering`: the metering check of apps/api/test/metering-engines.int.test.ts at
// 100,000 calls (BENCH_METERING_CALLS), printed for BENCHMARKS.md.
import { startMeteringLoad, type MeteringReport } from '../support/metering-load.ts';
import { machine } from './stats.ts';

const CALLS = Number(process.env.BENCH_METERING_CALLS ?? 100_000);

export function meteringTable(r: MeteringReport): string[] {
  const n = (x: number | bigint) => x.toLocaleString('en');
  const equal = (a: number | bigint, b: number | bigint) =>
    String(a) === String(b) ? '**equal**' : '**DIFFERENT**';
  return [
    '| | engines (vllm:*_tokens_total deltas) | Berth recorded | difference |',
    '|---|---|---|---|',
    `| completed calls: prompt tokens | ${n(r.completed.engines.prompt)} | ${n(r.completed.recorded.prompt)} | ${equal(r.completed.engines.prompt, r.completed.recorded.prompt)} |`,
    `| completed calls: generated tokens | ${n(r.completed.engines.generation)} | ${n(r.completed.recorded.generation)} | ${equal(r.completed.engines.generation, r.completed.recorded.generation)} |`,
    `| completed calls: money (tokens × prices + ${n(r.toolCalls)} tool calls + ${n(r.chronosRuns)} Chronos fees) | ${n(r.completed.expected)} µ | usage rows ${n(r.completed.usageCost)} µ, ledger ${n(r.completed.charged)} µ | ${equal(r.completed.expected, r.completed.charged)} |`,
    `| ${n(r.cut.streams)} cut chat / completion / dedicated streams: prompt | ${n(r.cut.engines.prompt)} | ${n(r.cut.recorded.prompt)} | ${n(r.cut.unbilledPrompt)} unbilled |`,
    `| the same: generated | ${n(r.cut.engines.generation)} | ${n(r.cut.recorded.generation)} | **${n(r.cut.unbilledGeneration)} unbilled (${r.cut.perStream.toFixed(2)} per stream)** |`,
    `| ${n(r.cutResponses.streams)} cut Responses streams: prompt | ${n(r.cutResponses.engines.prompt)} | ${n(r.cutResponses.recorded.prompt)} | ${n(r.cutResponses.unbilledPrompt)} unbilled (vLLM reports a Responses stream's usage at its end) |`,
    `| the same: generated | ${n(r.cutResponses.engines.generation)} | ${n(r.cutResponses.recorded.generation)} | ${n(r.cutResponses.unbilledGeneration)} unbilled (${r.cutResponses.perStream.toFixed(2)} per stream) |`,
  ];
}

export async function benchMetering(): Promise<string> {
  const load = await startMeteringLoad();
  try {
    const r = await load.run(CALLS, { concurrency: 16, seed: 100 });
    // The raw figures first, so nothing measured is lost to the table below.
    console.error(JSON.stringify(r, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v)));
    const avg = (await import('node:os'))
      .loadavg()
      .map((x) => x.toFixed(1))
      .join(' / ');
    return [
      `### Metering against the engines, ${CALLS.toLocaleString('en')} calls (${new Date().toISOString().slice(0, 10)}, ${machine()}, load ${avg})`,
      '',
      `${Object.keys(r.byKind).length} kinds of call, ${r.cutStreams.toLocaleString('en')} streams cut by the client at a random chunk, ${r.seconds.toFixed(0)} s, engines at 5 ms per token.`,
      '',
      ...meteringTable(r),
    ].join('\n');
  } finally {
    await load.close();
  }
}
