// Which replica of an endpoint takes the next attempt, by the endpoint's routing strategy:
// - roundRobin: in turn, per endpoint.
// - leastLoad: the fewest requests in flight there (ties in turn): this API replica's own, plus what
//   the engine last reported beyond them (./engine-load.ts: other API replicas' calls).
// - prefixAffinity: calls whose prompts start alike go to the same replica, so its prefix cache holds
//   their history (a multi-turn chat's earlier turns are not prefilled again). Consistent hashing with
//   bounded loads (CHWBL, as KubeAI routes): the call's key lands on a ring of virtual nodes and walks
//   on past any replica that would exceed its bound — LOAD_BOUND × the mean load, or LOAD_SLACK calls
//   more than the least-loaded replica, whichever is higher — so a hot prefix, or a replica slower
//   than the others (its calls pile up), spills over to the next replicas instead of queueing there;
//   and a replica that goes away moves only its keys.
import type { RoutingStrategy } from '@berth/crds';

/** One replica and the requests in flight on it. A picker's load is `inFlight + others`. */
export interface ReplicaLoad {
  /** Its OpenAI base URL (`http://ip:port/v1`). */
  readonly address: string;
  /** `http://ip:port`: where its `/metrics` are. */
  readonly origin: string;
  /** Requests this API replica has in flight there. */
  inFlight: number;
  /**
   * Requests the engine reported beyond this API replica's own at its last sample (other API
   * replicas' calls); 0 when unsampled or the sample is stale (./engine-load.ts).
   */
  others: number;
  /** When `others` was sampled (ms since the epoch; 0: never). */
  sampledAt: number;
}

/** One endpoint's Ready replicas, as a picker sees them. */
export interface ReplicaSet {
  readonly replicas: readonly ReplicaLoad[];
  /** Where the next tie-break starts; pickers may keep their own rotation here. */
  turn: number;
  /** The hash ring of prefixAffinity, built on its first use for this set of replicas. */
  ring?: Ring;
}

/** A call without an affinity key (nothing prompt-like in its body). */
export const NO_KEY = -1;

/**
 * Chooses a replica from a non-empty set. `avoid` is the replica the call's previous attempt failed
 * on; a picker takes another one when there is one. `key` is the call's affinity key (a 30-bit
 * hash of its prompt's leading part, or NO_KEY). Pickers run on every attempt: O(replicas)
 * or O(log ring) and no allocation (the ring is built once per replica set).
 */
export type ReplicaPicker = (set: ReplicaSet, avoid: ReplicaLoad | undefined, key: number) => ReplicaLoad;

export const roundRobin: ReplicaPicker = (set, avoid) => {
  const { replicas } = set;
  const n = replicas.length;
  const r = replicas[set.turn++ % n]!;
  return r === avoid && n > 1 ? replicas[set.turn++ % n]! : r;
};

export const leastInFlight: ReplicaPicker = (set, avoid) => {
  const { replicas } = set;
  const n = replicas.length;
  const start = set.turn++ % n;
  let best: ReplicaLoad | undefined;
  let least = 0;
  for (let i = 0; i < n; i++) {
    const r = replicas[(start + i) % n]!;
    if (r === avoid && n > 1) continue;
    const load = r.inFlight + r.others;
    if (!best || load < least) {
      best = r;
      least = load;
    }
  }
  return best!;
};

/**
 * A replica may take a keyed call while its load (own in-flight calls plus others', see ReplicaLoad)
 * after taking it stays within this factor of the mean (CHWBL's c, KubeAI's PrefixHash default) —
 * or within LOAD_SLACK of the least-loaded replica's, whichever allows more.
 */
export const LOAD_BOUND = 1.25;
/**
 * Calls a keyed call's replica may have beyond the least-loaded replica's and still take it. At low
 * loads (a few calls in flight per replica) the mean bound alone is 1–2 calls: it spilled a
 * conversation to another replica (a prefill of its whole history) whenever its own had two calls in
 * flight, where a free slot was most likely still there. With 2, in `npm run bench routing` (same
 * machine, back to back) the multi-turn prefix-cache hit ratio rose from 59 to 74 % and the 220 KB
 * prompts' TTFT p50 fell from 410 to 66 ms; a slow replica still gets fewer calls than the others.
 */
export const LOAD_SLACK = 2;
/** Points per replica on the ring: enough that 2–10 replicas get shares within a few percent. */
export const VIRTUAL_NODES = 160;

/** Sorted ring points (30-bit hashes) and, at the same index, the replica each belongs to. */
export interface Ring {
  readonly points: Uint32Array;
  readonly owners: Uint16Array;
}

export function buildRing(replicas: readonly ReplicaLoad[]): Ring {
  const n = replicas.length * VIRTUAL_NODES;
  // A point's position depends only on its replica's address, so a set that loses or gains one
  // replica keeps every other point where it was (only the keys of the changed replica move).
  const pairs: [number, number][] = [];
  replicas.forEach((r, i) => {
    for (let v = 0; v < VIRTUAL_NODES; v++) pairs.push([hashString(`${r.address}#${v}`), i]);
  });
  pairs.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const points = new Uint32Array(n);
  const owners = new Uint16Array(n);
  pairs.forEach(([p, i], at) => {
    points[at] = p;
    owners[at] = i;
  });
  return { points, owners };
}

export const prefixAffinity: ReplicaPicker = (set, avoid, key) => {
  const { replicas } = set;
  const n = replicas.length;
  if (n === 1) return replicas[0]!;
  if (key === NO_KEY) return leastInFlight(set, avoid, key);
  let total = 0;
  let least = Infinity;
  for (let i = 0; i < n; i++) {
    const load = replicas[i]!.inFlight + replicas[i]!.others;
    total += load;
    if (load < least) least = load;
  }
  const bound = Math.max(Math.ceil((LOAD_BOUND * (total + 1)) / n), least + LOAD_SLACK + 1);
  const ring = (set.ring ??= buildRing(replicas));
  const { points, owners } = ring;
  const size = points.length;
  // the first point at or after the key, clockwise
  let lo = 0;
  let hi = size;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (points[mid]! < key) lo = mid + 1;
    else hi = mid;
  }
  for (let step = 0, at = lo % size; step < size; step++, at = at + 1 === size ? 0 : at + 1) {
    const r = replicas[owners[at]!]!;
    if (r !== avoid && r.inFlight + r.others + 1 <= bound) return r;
  }
  // Unreachable while the bound is ≥ the mean (some replica is at or under it); kept for `avoid`.
  return leastInFlight(set, avoid, key);
};

export const PICKERS: Record<RoutingStrategy, ReplicaPicker> = {
  roundRobin,
  leastLoad: leastInFlight,
  prefixAffinity,
};

/** FNV-1a over UTF-16 code units (the first `limit`), avalanched to 30 bits. */
export function hashString(s: string, limit = s.length): number {
  let h = 0x811c9dc5;
  const end = Math.min(limit, s.length);
  for (let i = 0; i < end; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return avalanche(h);
}

/**
 * murmur3's fmix32 (FNV's bits mix poorly for short keys; this spreads them over the ring), cut to
 * 30 bits: a small integer V8 passes around unboxed, where a full uint32 above 2^31 would be a heap
 * number allocated at each call.
 */
export function avalanche(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 2;
}

/**
 * The replica sets of every endpoint, kept from the Backends' address lists. A list that changes
 * (a new array) is mapped again; replicas still in it keep their in-flight counts.
 */
export class ReplicaTable {
  private readonly byEndpoint = new Map<
    string,
    { source: readonly string[]; set: ReplicaSet; byAddress: Map<string, ReplicaLoad> }
  >();

  constructor(
    private readonly addresses: (id: string) => readonly string[],
    /** The OpenAI API's path on a replica. */
    private readonly basePath: string,
  ) {}

  /** The endpoint's current replica set (empty when none is Ready). */
  of(id: string): ReplicaSet {
    const source = this.addresses(id);
    let entry = this.byEndpoint.get(id);
    if (entry?.source === source) return entry.set;
    if (!source.length) {
      this.byEndpoint.delete(id);
      return EMPTY;
    }
    const previous = entry?.byAddress;
    const byAddress = new Map<string, ReplicaLoad>();
    for (const a of source) {
      const address = a + this.basePath;
      byAddress.set(
        address,
        previous?.get(address) ?? { address, origin: a, inFlight: 0, others: 0, sampledAt: 0 },
      );
    }
    entry = { source, set: { replicas: [...byAddress.values()], turn: entry?.set.turn ?? 0 }, byAddress };
    this.byEndpoint.set(id, entry);
    return entry.set;
  }
}

const EMPTY: ReplicaSet = { replicas: [], turn: 0 };
