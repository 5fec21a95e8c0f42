// The engine-load correction of leastLoad and prefixAffinity: the pickers add what the engines report
// beyond this API replica's own calls (other API replicas' traffic), the sampler reads it from real
// engine simulators' /metrics, stale or failing samples count as nothing, and roundRobin endpoints
// are never scraped.
import { type DedicatedEndpoint, type RoutingStrategy } from '@berth/crds';
import { startEngineSim, type EngineSimHandle } from '@berth/engine-sim';
import { pino } from 'pino';
import { Agent, request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  engineLoadSampler,
  gaugeSum,
  othersFromSample,
  STALE_INTERVALS,
  type SampleOutcome,
} from '../src/dedicated/upstream/engine-load.ts';
import { platformUpstream } from '../src/dedicated/upstream/endpoint-upstream.ts';
import { endpointObject } from './support/endpoint.ts';
import {
  hashString,
  leastInFlight,
  NO_KEY,
  prefixAffinity,
  ReplicaTable,
  type ReplicaSet,
} from '../src/dedicated/upstream/replicas.ts';

const logger = pino({ level: 'silent' });

function replicaSet(n: number): ReplicaSet {
  const list = Array.from({ length: n }, (_, i) => `http://10.0.0.${i + 1}:8000`);
  return new ReplicaTable(() => list, '/v1').of('e');
}

describe('the pickers with engine-reported load', () => {
  it('leastLoad avoids a replica busy with another API replica’s calls', () => {
    const set = replicaSet(3);
    const [a, b, c] = set.replicas;
    a!.others = 5; // the engine runs 5 calls this process did not send
    b!.inFlight = 1;
    c!.inFlight = 2;
    // own counts alone would pick a (0 in flight); with the engine's view b is the least loaded
    expect(leastInFlight(set, undefined, NO_KEY)).toBe(b);
    const picks = new Map<string, number>();
    for (let i = 0; i < 8; i++) {
      const r = leastInFlight(set, undefined, NO_KEY);
      r.inFlight++;
      picks.set(r.address, (picks.get(r.address) ?? 0) + 1);
    }
    // it fills b and c up to a's load first: loads 5/5/5 after 7 picks, the 8th goes anywhere
    expect(a!.inFlight + b!.inFlight + c!.inFlight).toBe(11);
    expect(a!.inFlight).toBeLessThanOrEqual(1);
    expect(b!.inFlight + b!.others).toBeGreaterThanOrEqual(5);
    expect(c!.inFlight + c!.others).toBeGreaterThanOrEqual(5);
  });

  it('prefixAffinity’s load bound counts other API replicas’ calls: a busy home replica spills', () => {
    const set = replicaSet(4);
    const key = hashString('a conversation whose home is busy elsewhere');
    const home = prefixAffinity(set, undefined, key);
    expect(prefixAffinity(set, undefined, key)).toBe(home); // idle: it stays home
    // another API replica holds 8 calls there: bound max(ceil(1.25 × (8 + 1) / 4), least 0 + 3) = 3 < 9
    home.others = 8;
    const next = prefixAffinity(set, undefined, key);
    expect(next).not.toBe(home);
    // and it is sticky on the next replica of the ring, not scattered
    next.inFlight++;
    expect(prefixAffinity(set, undefined, key)).toBe(next);
    // a load within the bound does not move it: home 2 from others, 3 in flight elsewhere → bound
    // max(ceil(1.25 × 6 / 4), 0 + 3) = 3, home's 2 + 1 fits
    next.inFlight = 3;
    home.others = 2;
    expect(prefixAffinity(set, undefined, key)).toBe(home);
    // 3 from others is more than 2 past the least-loaded replica's 0: above the bound
    next.inFlight = 0;
    home.others = 3;
    expect(prefixAffinity(set, undefined, key)).not.toBe(home);
  });

  it('reads the same as before when nothing was sampled (others = 0)', () => {
    const set = replicaSet(3);
    set.replicas[0]!.inFlight = 2;
    set.replicas[1]!.inFlight = 1;
    expect(leastInFlight(set, undefined, NO_KEY)).toBe(set.replicas[2]);
  });
});

describe('reading a metrics page', () => {
  it('sums vllm:num_requests_running / waiting over label sets, ignoring HELP, TYPE and look-alikes', async () => {
    const sim = await startEngineSim({ model: 'org/model' });
    sim.metrics.running = 7;
    sim.metrics.waiting = 3;
    const page = await (await request(`${sim.url}/metrics`)).body.text();
    sim.metrics.running = 0;
    sim.metrics.waiting = 0;
    await sim.close(0);
    expect(gaugeSum(page, 'vllm:num_requests_running')).toBe(7);
    expect(gaugeSum(page, 'vllm:num_requests_waiting')).toBe(3);
    const twoEngines =
      '# HELP vllm:num_requests_running Number of requests.\n' +
      '# TYPE vllm:num_requests_running gauge\n' +
      'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n' +
      'vllm:num_requests_running{engine="1",model_name="m"} 4.0\n' +
      'vllm:num_requests_running_total{engine="0"} 99.0\n' +
      'vllm:num_requests_waiting 1';
    expect(gaugeSum(twoEngines, 'vllm:num_requests_running')).toBe(6);
    expect(gaugeSum(twoEngines, 'vllm:num_requests_waiting')).toBe(1);
    expect(gaugeSum('# HELP vllm:num_requests_running x\n', 'vllm:num_requests_running')).toBeUndefined();
  });

  it('takes for others only what exceeds this process’s own calls, never below 0', () => {
    expect(othersFromSample(10, 3, 3)).toBe(7);
    // own calls that began or ended while the scrape was on its way are never counted as others'
    expect(othersFromSample(10, 3, 5)).toBe(5);
    expect(othersFromSample(10, 5, 3)).toBe(5);
    expect(othersFromSample(2, 4, 4)).toBe(0);
  });
});

describe('the sampler against engine simulators', () => {
  let sims: EngineSimHandle[];
  const client = new Agent({ connections: null });
  const held: AbortController[] = [];

  /** `n` calls straight to the engine (another API replica's), each waiting 60 s for its first token. */
  async function hold(sim: EngineSimHandle, n: number) {
    for (let i = 0; i < n; i++) {
      const ac = new AbortController();
      held.push(ac);
      void request(`${sim.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-sim-ttft-ms': '60000' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: `held ${i}` }],
          stream: true,
        }),
        dispatcher: client,
        signal: ac.signal,
      }).catch(() => {});
    }
    const want = sim.metrics.running + sim.metrics.waiting + n;
    for (let t = 0; sim.metrics.running + sim.metrics.waiting < want; t++) {
      if (t > 200) throw new Error('the held calls did not reach the engine');
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  beforeAll(async () => {
    sims = await Promise.all([1, 2].map(() => startEngineSim({ model: 'm', ttftMs: 0, itlMs: 0 })));
  });
  afterEach(async () => {
    for (const ac of held.splice(0)) ac.abort();
    for (const s of sims) {
      for (let t = 0; s.metrics.running + s.metrics.waiting > 0 && t < 200; t++)
        await new Promise((r) => setTimeout(r, 10));
    }
  });
  afterAll(async () => {
    await client.close();
    for (const s of sims ?? []) await s.close(0);
  });

  /** A sampler whose rounds the test drives (the interval is too long for its timer to fire). */
  function sampled(list: () => readonly string[], intervalMs = 100_000) {
    const table = new ReplicaTable(list, '/v1');
    const outcomes: SampleOutcome[] = [];
    const sampler = engineLoadSampler({
      intervalMs,
      replicas: (id) => table.of(id),
      logger,
      onSample: (o) => outcomes.push(o),
    });
    return { table, sampler, outcomes };
  }

  it('counts the engine’s running + waiting beyond this process’s own, and leastLoad then avoids it', async () => {
    const urls = sims.map((s) => s.url);
    const { table, sampler, outcomes } = sampled(() => urls);
    const [a, b] = table.of('e').replicas;
    await hold(sims[0]!, 3);
    a!.inFlight = 1; // one of the four there is "ours"
    await hold(sims[0]!, 1);
    sampler.use('e');
    await sampler.tick();
    expect(outcomes).toEqual(['ok', 'ok']);
    expect([a!.others, b!.others]).toEqual([3, 0]);
    a!.inFlight = 0;
    // own counts say a has 0 and b 0: a tie; the engine says a has 4
    for (let i = 0; i < 3; i++) {
      const r = leastInFlight(table.of('e'), undefined, NO_KEY);
      expect(r).toBe(b);
      r.inFlight++;
    }
    await sampler.close();
    expect(a!.others).toBe(0); // closed: back to own counts
  });

  it('ignores a sample older than 3 intervals: a replica that stops answering decays to own count', async () => {
    let list = sims.map((s) => s.url);
    const { table, sampler, outcomes } = sampled(() => list);
    await hold(sims[0]!, 2);
    sampler.use('e');
    await sampler.tick();
    const a = table.of('e').replicas[0]!;
    expect(a.others).toBe(2);
    const sampledAt = a.sampledAt;
    // its /metrics now fail (nothing listens on the new address): the old sample holds within
    // 3 intervals, and counts as nothing after
    list = ['http://127.0.0.1:1', list[1]!];
    const dead = table.of('e').replicas[0]!;
    dead.others = 2;
    dead.sampledAt = sampledAt;
    await sampler.tick(sampledAt + STALE_INTERVALS * 100_000 - 1);
    expect(dead.others).toBe(2);
    expect(outcomes.slice(-2).sort()).toEqual(['failed', 'ok']);
    await sampler.tick(sampledAt + STALE_INTERVALS * 100_000 + 1);
    expect(dead.others).toBe(0);
    expect(outcomes.filter((o) => o === 'failed')).toHaveLength(2);
    await sampler.close();
  });

  it('samples nothing at 0, and stops sampling an endpoint without calls', async () => {
    const urls = sims.map((s) => s.url);
    const off = sampled(() => urls, 0);
    off.sampler.use('e');
    await off.sampler.tick();
    expect(off.outcomes).toEqual([]);
    expect(off.sampler.active).toBe(0);
    await off.sampler.close();

    const on = sampled(() => urls);
    await hold(sims[1]!, 1);
    on.sampler.use('e');
    await on.sampler.tick();
    expect(on.table.of('e').replicas[1]!.others).toBe(1);
    // no call for 30 intervals: not sampled any more, and its correction dropped
    for (let i = 0; i < 31; i++) await on.sampler.tick();
    expect(on.sampler.active).toBe(0);
    const scrapes = on.outcomes.length;
    await on.sampler.tick();
    expect(on.outcomes.length).toBe(scrapes);
    expect(on.table.of('e').replicas[1]!.others).toBe(0);
    await on.sampler.close();
  });

  it('does not scrape an endpoint with one replica (nothing to choose between)', async () => {
    let urls = [sims[0]!.url];
    const { table, sampler, outcomes } = sampled(() => urls);
    await hold(sims[0]!, 2);
    sampler.use('e');
    await sampler.tick();
    expect(outcomes).toEqual([]);
    expect(table.of('e').replicas[0]!.others).toBe(0);
    // scaled to two: both scraped from the next round on
    urls = sims.map((s) => s.url);
    await sampler.tick();
    expect(outcomes).toEqual(['ok', 'ok']);
    expect(table.of('e').replicas[0]!.others).toBe(2);
    await sampler.close();
  });

  it('platformUpstream samples leastLoad and prefixAffinity endpoints, never roundRobin ones', async () => {
    const endpoint = (id: string, strategy: RoutingStrategy): DedicatedEndpoint =>
      endpointObject(
        id,
        { phase: 'up' },
        {
          spec: {
            scaling: { minReplicas: 1, maxReplicas: 2, idleTimeoutSeconds: 900 },
            routing: { strategy },
          },
        },
      );
    const addresses = sims.map((s) => s.url);
    const outcomes: SampleOutcome[] = [];
    const up = platformUpstream({
      endpoints: { get: () => undefined, watch: () => () => {}, annotate: async () => {} },
      backends: {
        ready: async () => {},
        addresses: () => addresses,
        watch: () => () => {},
        close: async () => {},
      },
      logger,
      engineLoadIntervalMs: 100_000, // ticks driven by the test
      onEngineSample: (o) => outcomes.push(o),
    });
    const signal = new AbortController().signal;
    const rr = await up.acquire(endpoint('endpt-rr', 'roundRobin'), { hold: 0, signal });
    if (rr.ok) rr.lease.release();
    expect(up.engineLoad.active).toBe(0);
    for (const [id, strategy] of [
      ['endpt-ll', 'leastLoad'],
      ['endpt-pa', 'prefixAffinity'],
    ] as const) {
      const got = await up.acquire(endpoint(id, strategy), { hold: 0, signal });
      expect(got.ok).toBe(true);
      if (got.ok) got.lease.release();
    }
    expect(up.engineLoad.active).toBe(2);
    await up.engineLoad.tick();
    expect(outcomes.length).toBeGreaterThanOrEqual(4); // 2 endpoints × 2 replicas (plus the first round's)
    expect(outcomes.every((o) => o === 'ok')).toBe(true);
    await up.close();
  });
});
