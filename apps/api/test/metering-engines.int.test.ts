// Metering checked against the engines (issue 32): 10,000 calls of every kind through one Berth —
// catalog models on every OpenAI route, streamed and not, the pinned route, Olympus, managed tool
// loops, Chronos runs, dedicated endpoints — with a tenth of the streams cut by the client at a random
// chunk (test/support/metering-load.ts). Calls that completed are recorded exactly as the engines
// counted them, token for token, and charged tokens × prices + fees, micro-unit for micro-unit; cut
// streams leave at most what was generated after the cut unbilled, never the other way round.
// The figures are printed for BENCHMARKS.md; `npm run bench metering` runs 100,000.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMeteringLoad, type MeteringLoad } from '@berth/test/support/metering-load';

const CALLS = Number(process.env.METERING_CALLS ?? 10_000);
let load: MeteringLoad;

beforeAll(async () => {
  load = await startMeteringLoad();
}, 120_000);
afterAll(async () => load?.close());

describe(`${CALLS} mixed calls against the engines' counters`, () => {
  it('completed calls: recorded = counted, charged = tokens × prices + fees; cut streams: never over-billed', async () => {
    const r = await load.run(CALLS, { concurrency: 16, seed: 32 });
    console.error(
      'metering report',
      JSON.stringify(r, (_k, v) => (typeof v === 'bigint' ? String(v) : v)),
    );
    expect(Object.keys(r.byKind).length).toBe(15);
    expect(r.cutStreams).toBeGreaterThan(CALLS / 150);
    // Completed: exactly equal.
    expect(r.completed.recorded).toEqual(r.completed.engines);
    expect(r.completed.usageCost).toBe(r.completed.expected);
    expect(r.completed.charged).toBe(r.completed.expected);
    // Cut streams: what the engines generated after the proxy's last read is not billed — a few
    // tokens per stream at most, never more billed than generated. Cut Responses streams are billed
    // their text deltas only: vLLM reports a Responses stream's usage when it ends, so a cut one's
    // prompt tokens are not known (under-billed, reported).
    for (const g of [r.cut, r.cutResponses]) {
      expect(g.unbilledGeneration).toBeGreaterThanOrEqual(0);
      expect(g.perStream).toBeLessThanOrEqual(2);
      expect(g.unbilledPrompt).toBeGreaterThanOrEqual(0);
    }
    expect(r.cut.unbilledPrompt).toBe(0);
    expect(r.cutCharged).toBe(r.cut.usageCost + r.cutResponses.usageCost);
  }, 1_800_000);
});
