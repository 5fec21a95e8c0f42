// The replica pickers of the routing strategies: how keys spread over the ring, that a new key goes
// to a least-loaded replica and a conversation sticks to its home, that the load bound spills a hot prefix over and passes a slow replica by,
// that no call is refused, what moves when a replica goes away, and that a pick allocates nothing.
// Plus the affinity key a request body gets.
import { GCProfiler } from 'node:v8';
import { describe, expect, it } from 'vitest';
import { affinityKey } from '../src/dedicated/upstream/affinity.ts';
import {
  HOME_KEYS,
  hashString,
  LOAD_BOUND,
  LOAD_SLACK,
  NO_KEY,
  PICKERS,
  prefixAffinity,
  ReplicaTable,
  roundRobin,
  type ReplicaSet,
} from '../src/dedicated/upstream/replicas.ts';

function replicaSet(n: number): { set: ReplicaSet; table: ReplicaTable; list: string[] } {
  const list = Array.from({ length: n }, (_, i) => `http://10.0.0.${i + 1}:8000`);
  const table = new ReplicaTable(() => list, '/v1');
  return { set: table.of('e'), table, list };
}

/** The replica (index) a key's ring point is on, as an idle set of 4 picks it. */
function ringIndex(key: number): number {
  const { set } = replicaSet(4);
  return set.replicas.indexOf(prefixAffinity(set, undefined, key));
}

/** Deterministic keys, as a stream of distinct prompts would give. */
const keys = (count: number, tag = 'conversation') =>
  Array.from({ length: count }, (_, i) => hashString(`${tag} ${i}`));

describe('prefixAffinity', () => {
  it('spreads distinct keys evenly over the replicas (idle replicas, 20,000 keys)', () => {
    for (const n of [2, 4, 8]) {
      const { set } = replicaSet(n);
      const counts = new Map<string, number>();
      for (const k of keys(20_000)) {
        const r = prefixAffinity(set, undefined, k);
        counts.set(r.address, (counts.get(r.address) ?? 0) + 1);
      }
      expect(counts.size).toBe(n);
      const mean = 20_000 / n;
      for (const c of counts.values()) {
        expect(c / mean, `${n} replicas: ${[...counts.values()].join(', ')}`).toBeGreaterThan(0.8);
        expect(c / mean).toBeLessThan(1.2);
      }
    }
  });

  it('sends every call with the same key to the same replica while loads allow', () => {
    const { set } = replicaSet(4);
    for (const k of keys(200)) {
      const first = prefixAffinity(set, undefined, k);
      const others = set.replicas.filter((r) => r !== first);
      for (let i = 0; i < 6; i++) {
        // calls in flight elsewhere do not move it, nor do its own up to the bound
        others[i % 3]!.inFlight++;
        if (i % 2) first.inFlight++;
        expect(prefixAffinity(set, undefined, k)).toBe(first);
      }
      for (const r of set.replicas) r.inFlight = 0;
    }
  });

  it('bounds the load: one hot prefix spills over, no replica past ceil(1.25 × mean) or least + 2', () => {
    const { set } = replicaSet(4);
    const hot = hashString('the same system prompt and question');
    const home = prefixAffinity(set, undefined, hot);
    for (let total = 0; total < 400; total++) {
      const r = prefixAffinity(set, undefined, hot);
      r.inFlight++;
      const least = Math.min(...set.replicas.map((x) => x.inFlight));
      const bound = Math.max(Math.ceil((LOAD_BOUND * (total + 1)) / 4), least + LOAD_SLACK + 1);
      for (const x of set.replicas) expect(x.inFlight).toBeLessThanOrEqual(bound);
    }
    expect(LOAD_SLACK).toBe(2);
    // the key's own replica took the most; the others share the spill
    const loads = set.replicas.map((r) => r.inFlight);
    expect(home.inFlight).toBe(Math.max(...loads));
    expect(Math.max(...loads) / (400 / 4)).toBeLessThanOrEqual(LOAD_BOUND);
    expect(Math.min(...loads)).toBeGreaterThan(0);
  });

  it('keeps a conversation on its replica under balanced load while it has ≤ 2 calls more than the least loaded', () => {
    // 3 calls in flight over 4 replicas: the mean bound alone (ceil(1.25 × 4 / 4) = 2) spilled the
    // conversation as soon as its replica had two calls; now up to the least-loaded's + 2.
    const { set } = replicaSet(4);
    for (const k of keys(200)) {
      const home = prefixAffinity(set, undefined, k);
      const others = set.replicas.filter((r) => r !== home);
      others[0]!.inFlight = 1;
      home.inFlight = 2;
      expect(prefixAffinity(set, undefined, k)).toBe(home);
      // every replica busy alike: it stays home whatever the level
      for (const level of [1, 5, 40]) {
        for (const r of set.replicas) r.inFlight = level;
        expect(prefixAffinity(set, undefined, k)).toBe(home);
      }
      // three more than an idle replica, with few calls in flight: it goes elsewhere, and to the
      // same replica each time (the ring's next one), so that one caches the conversation too
      for (const r of set.replicas) r.inFlight = 0;
      home.inFlight = 3;
      const spill = prefixAffinity(set, undefined, k);
      expect(spill).not.toBe(home);
      expect(prefixAffinity(set, undefined, k)).toBe(spill);
      home.inFlight = 0;
    }
  });

  it('passes a slow replica by: its calls pile up, and past its bound the keys it owns go elsewhere', () => {
    // A noisy neighbour: the same arrivals, but the slow replica holds each call 4× longer. Simulated
    // in steps of 1 ms: 30 calls/s of distinct keys, calls take 100 ms (400 ms on the slow replica).
    const { set } = replicaSet(4);
    const slow = set.replicas[0]!;
    const ends: { at: number; r: (typeof set.replicas)[number] }[] = [];
    const served = new Map(set.replicas.map((r) => [r, 0]));
    const ks = keys(3_000, 'noisy');
    let next = 0;
    for (let now = 0; now < 100_000; now++) {
      for (let i = ends.length - 1; i >= 0; i--)
        if (ends[i]!.at <= now) {
          ends[i]!.r.inFlight--;
          ends.splice(i, 1);
        }
      if (now % 33 !== 0) continue;
      const least = Math.min(...set.replicas.map((x) => x.inFlight));
      const r = prefixAffinity(set, undefined, ks[next++ % ks.length]!);
      // given a call only with at most 2 calls past the least-loaded replica (the mean bound is lower here)
      if (r === slow) expect(slow.inFlight).toBeLessThanOrEqual(least + LOAD_SLACK);
      r.inFlight++;
      served.set(r, served.get(r)! + 1);
      ends.push({ at: now + (r === slow ? 400 : 100), r });
    }
    const total = [...served.values()].reduce((a, b) => a + b, 0);
    // round robin would give it a quarter (and a queue: it serves a quarter of what the others do)
    expect(served.get(slow)! / total).toBeLessThan(0.2);
    for (const r of set.replicas.slice(1)) expect(served.get(r)! / total).toBeGreaterThan(0.24);
  });

  it('never refuses a call: every pick is a replica, however loaded they all are', () => {
    const { set } = replicaSet(4);
    for (const r of set.replicas) r.inFlight = 1_000;
    set.replicas[2]!.others = 5_000;
    for (const k of keys(500)) {
      const r = prefixAffinity(set, set.replicas[1], k);
      expect(set.replicas).toContain(r);
      expect(r).not.toBe(set.replicas[1]);
      expect(r).not.toBe(set.replicas[2]); // 6,000 is past every bound; the others are not
    }
  });

  it('a retry avoids the replica that failed; a lone replica is still given', () => {
    const { set } = replicaSet(3);
    for (const k of keys(100)) {
      const first = prefixAffinity(set, undefined, k);
      expect(prefixAffinity(set, first, k)).not.toBe(first);
    }
    const one = replicaSet(1).set;
    expect(prefixAffinity(one, one.replicas[0], 7)).toBe(one.replicas[0]);
  });

  it('when a replica goes away only its keys move; in-flight counts survive the change', () => {
    let list: readonly string[] = ['http://a:8000', 'http://b:8000', 'http://c:8000', 'http://d:8000'];
    const table = new ReplicaTable(() => list, '/v1');
    const ks = keys(2_000);
    const before = ks.map((k) => prefixAffinity(table.of('e'), undefined, k).address);
    table.of('e').replicas[0]!.inFlight = 1;
    list = list.filter((a) => a !== 'http://c:8000'); // the Backends give a new array on a change
    const after = table.of('e');
    expect(after.replicas.map((r) => [r.address, r.inFlight])).toEqual([
      ['http://a:8000/v1', 1],
      ['http://b:8000/v1', 0],
      ['http://d:8000/v1', 0],
    ]);
    after.replicas[0]!.inFlight = 0;
    let moved = 0;
    ks.forEach((k, i) => {
      const now = prefixAffinity(after, undefined, k).address;
      if (before[i] === 'http://c:8000/v1') moved++;
      else expect(now).toBe(before[i]);
    });
    expect(moved).toBeGreaterThan(300); // about a quarter of the keys lived there
  });

  it('a new key goes to the least-loaded replica, its ring point’s only when that one is among the least loaded', () => {
    // Distinct first questions under one shared system prompt: nothing of theirs is cached anywhere,
    // so no call waits behind another while some replica is idle (the ring alone put 123 / 109 /
    // 119 / 129 of 480 calls on four replicas, two at once on one while another sat idle).
    const { set } = replicaSet(4);
    for (const k of keys(2_000, 'first question')) {
      const least = Math.min(...set.replicas.map((r) => r.inFlight));
      const r = prefixAffinity(set, undefined, k);
      expect(r.inFlight).toBe(least);
      r.inFlight++;
      if (set.replicas.every((x) => x.inFlight >= 3)) for (const x of set.replicas) x.inFlight = 0;
    }
  });

  it('later calls with a key follow it to its home, not to its ring point', () => {
    for (const k of keys(200)) {
      const { set } = replicaSet(4);
      const ring = ringIndex(k);
      set.replicas[ring]!.inFlight = 1; // its ring replica is busy when the key is new
      const home = prefixAffinity(set, undefined, k);
      expect(set.replicas.indexOf(home)).not.toBe(ring);
      // now every replica is idle: the key stays where its history is
      set.replicas[ring]!.inFlight = 0;
      for (let i = 0; i < 5; i++) expect(prefixAffinity(set, undefined, k)).toBe(home);
    }
  });

  it('keeps the last HOME_KEYS keys or more; a key in use is carried forward, a forgotten key is new again', () => {
    const { set } = replicaSet(4);
    const kept = hashString('a long conversation');
    const forgotten = hashString('an old one');
    // both homed away from their ring points (busy when they arrive)
    const homeOf = new Map<number, number>();
    for (const k of [kept, forgotten]) {
      for (const r of set.replicas) r.inFlight = 0;
      set.replicas[ringIndex(k)]!.inFlight = 1;
      homeOf.set(k, set.replicas.indexOf(prefixAffinity(set, undefined, k)));
      expect(homeOf.get(k)).not.toBe(ringIndex(k));
    }
    for (const r of set.replicas) r.inFlight = 0;
    // 3 × HOME_KEYS new keys arrive; `kept` is used every 1,000 of them
    const many = keys(3 * HOME_KEYS, 'other');
    many.forEach((k, i) => {
      prefixAffinity(set, undefined, k);
      if (i % 1_000 === 0)
        expect(set.replicas.indexOf(prefixAffinity(set, undefined, kept))).toBe(homeOf.get(kept));
    });
    expect(set.homes!.current.size + set.homes!.previous.size).toBeLessThanOrEqual(2 * HOME_KEYS);
    expect(set.replicas.indexOf(prefixAffinity(set, undefined, kept))).toBe(homeOf.get(kept));
    // forgotten: new again, so (all idle) its ring point's
    expect(set.replicas.indexOf(prefixAffinity(set, undefined, forgotten))).toBe(ringIndex(forgotten));
  });

  it('a key whose home went away is new again; the others keep theirs', () => {
    let list: readonly string[] = ['http://a:8000', 'http://b:8000', 'http://c:8000'];
    const table = new ReplicaTable(() => list, '/v1');
    const ks = keys(300);
    const homes = ks.map((k, i) => {
      const set = table.of('e');
      for (const r of set.replicas) r.inFlight = 0;
      set.replicas[i % 3]!.inFlight = 5; // homes spread off their ring points
      return prefixAffinity(set, undefined, k).address;
    });
    list = ['http://a:8000', 'http://b:8000'];
    const after = table.of('e');
    for (const r of after.replicas) r.inFlight = 0;
    ks.forEach((k, i) => {
      const now = prefixAffinity(after, undefined, k).address;
      if (homes[i] === 'http://c:8000/v1') expect(now).not.toBe(homes[i]);
      else expect(now).toBe(homes[i]);
    });
    // gone for good: the endpoint loses every replica, then gets them back as new objects
    list = [];
    expect(table.of('e').replicas).toEqual([]);
    list = ['http://a:8000', 'http://b:8000'];
    const back = table.of('e');
    expect(back.replicas.every((r) => !r.gone)).toBe(true);
  });

  it('without a key it picks by least load', () => {
    const { set } = replicaSet(3);
    set.replicas[0]!.inFlight = 2;
    set.replicas[1]!.inFlight = 1;
    expect(prefixAffinity(set, undefined, NO_KEY)).toBe(set.replicas[2]);
  });

  it('allocates nothing per pick (no garbage collection over 4,000,000 picks)', () => {
    const { set } = replicaSet(4);
    const ks = Uint32Array.from(keys(1024));
    prefixAffinity(set, undefined, ks[0]!); // builds the ring
    for (const strategy of ['prefixAffinity', 'leastLoad', 'roundRobin'] as const) {
      const pick = PICKERS[strategy];
      for (let i = 0; i < 300_000; i++) pick(set, undefined, ks[i & 1023]!); // warm (JIT)
      const profiler = new GCProfiler();
      profiler.start();
      // 8 bytes a pick would be 32 MB: about 8 scavenges of the young generation (one may come
      // from the compiler itself, optimizing the loop while it runs)
      for (let i = 0; i < 4_000_000; i++) {
        const r = pick(set, undefined, ks[i & 1023]!);
        r.inFlight++;
        if (r.inFlight > 3) r.inFlight = 0;
      }
      const { statistics } = profiler.stop();
      expect(statistics.length, strategy).toBeLessThanOrEqual(1);
    }
  });
});

describe('roundRobin', () => {
  it('takes the replicas in turn and skips the failed one on a retry', () => {
    const { set } = replicaSet(3);
    set.replicas[0]!.inFlight = 5; // load does not matter
    const picks = Array.from({ length: 6 }, () => roundRobin(set, undefined, NO_KEY).address.slice(7, 15));
    expect(picks).toEqual(['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.1', '10.0.0.2', '10.0.0.3']);
    expect(roundRobin(set, set.replicas[0], NO_KEY)).not.toBe(set.replicas[0]);
  });
});

describe('affinityKey', () => {
  const system = { role: 'system', content: 'You are a helpful assistant. '.repeat(40) };

  it('is the same for every turn of a conversation', () => {
    const turn1 = [system, { role: 'user', content: 'Plan a trip to Lisbon.' }];
    const turn3 = [
      ...turn1,
      { role: 'assistant', content: 'Day one: …' },
      { role: 'user', content: 'And day two?' },
      { role: 'assistant', content: 'Day two: …' },
      { role: 'user', content: 'Cheaper?' },
    ];
    expect(affinityKey({ messages: turn1 })).toBe(affinityKey({ messages: turn3 }));
    expect(affinityKey({ messages: turn1 })).not.toBe(NO_KEY);
  });

  it('differs between conversations that share only the system prompt, or only the question', () => {
    const a = affinityKey({ messages: [system, { role: 'user', content: 'Plan a trip to Lisbon.' }] });
    const b = affinityKey({ messages: [system, { role: 'user', content: 'Plan a trip to Porto.' }] });
    const c = affinityKey({ messages: [{ role: 'user', content: 'Plan a trip to Lisbon.' }] });
    expect(new Set([a, b, c]).size).toBe(3);
  });

  it('reads text parts, completion prompts and Responses input; NO_KEY without a prompt', () => {
    const parts = affinityKey({
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hello there' }] }],
    });
    expect(parts).toBe(affinityKey({ messages: [{ role: 'user', content: 'hello there' }] }));
    const long = 'x'.repeat(300);
    expect(affinityKey({ prompt: long + 'a' })).toBe(affinityKey({ prompt: long + 'b' }));
    expect(affinityKey({ prompt: ['p1', 'p2'] })).toBe(affinityKey({ prompt: 'p1' }));
    expect(affinityKey({ input: 'hi' })).not.toBe(affinityKey({ input: 'hi', instructions: 'Be brief.' }));
    expect(affinityKey({ input: [{ role: 'user', content: 'hi' }] })).not.toBe(NO_KEY);
    expect(affinityKey({ model: 'm' })).toBe(NO_KEY);
    expect(affinityKey({ messages: [] })).toBe(NO_KEY);
    expect(affinityKey(undefined)).toBe(NO_KEY);
  });
});
