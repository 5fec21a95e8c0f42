// Which replica of an endpoint takes the next attempt, by the endpoint's routing strategy:
// - roundRobin: in turn, per endpoint.
// - leastLoad: the fewest requests in flight there (ties in turn): this API replica's own, plus what
//   the engine last reported beyond them (./engine-load.ts: other API replicas' calls).
// - prefixAffinity: calls whose prompts start alike go to the same replica, so its prefix cache holds
//   their history (a multi-turn chat's earlier turns are not prefilled again). A key this API replica
//   has seen lately goes where it went last (its home, below) while that replica stays within its
//   bound — LOAD_BOUND × the mean load, or LOAD_SLACK calls more than the least-loaded replica,
//   whichever is higher. A key not seen lately has nothing cached anywhere beyond what every replica
//   shares (a common system prompt), so it goes to the least-loaded replica: the key's point on a
//   ring of virtual nodes (consistent hashing, as KubeAI routes) when that replica is among the least
//   loaded — so several API replicas, and this one after a restart, mostly agree — or else the least
//   loaded one. A home past its bound (a hot prefix, or a replica slower than the others: its calls
//   pile up) spills to the next replica on the ring within bound, which becomes the key's home.
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
  /** Set when the replica left its endpoint's set: keys homed on it are homeless again. */
  gone?: true;
}

/** One endpoint's Ready replicas, as a picker sees them. */
export interface ReplicaSet {
  readonly replicas: readonly ReplicaLoad[];
  /** Where the next tie-break starts; pickers may keep their own rotation here. */
  turn: number;
  /** The hash ring of prefixAffinity, built on its first use for this set of replicas. */
  ring?: Ring;
  /** prefixAffinity's keys and the replica each went to last (kept across replica-set changes). */
  homes?: Homes;
}

/**
 * Where keys went last, in two generations: a key is looked up in the current one, then in the
 * previous one (and copied forward); when the current one holds HOME_KEYS keys it becomes the
 * previous one and the oldest generation is dropped. A key used within the last HOME_KEYS new keys
 * is always kept; a hit allocates nothing.
 */
export interface Homes {
  current: Map<number, ReplicaLoad>;
  previous: Map<number, ReplicaLoad>;
}

/** Keys per generation of an endpoint's homes (two generations: at most 2 × this, ~1.5 MB). */
export const HOME_KEYS = 16_384;

/** A call without an affinity key (nothing prompt-like in its body). */
export const NO_KEY = -1;

/**
 * Chooses a replica from a non-empty set. `avoid` is the replica the call's previous attempt failed
 * on; a picker takes another one when there is one. `key` is the call's affinity key (a 30-bit
 * hash of its prompt's leading part, or NO_KEY). Pickers run on every attempt: O(replicas)
 * or O(log ring), and no allocation but a new key's home (the ring is built once per replica set).
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
  const homes = (set.homes ??= { current: new Map(), previous: new Map() });
  const home = homeOf(homes, key);
  if (home && home !== avoid && home.inFlight + home.others + 1 <= bound) return home;
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
  // A new key's ring replica only while it is among the least loaded; a home past its bound (or
  // failed) spills to the next one on the ring within bound (its own keys' neighbour, so the spills
  // of one key land together).
  const limit = home ? bound : least + 1;
  let chosen: ReplicaLoad | undefined;
  for (let step = 0, at = lo % size; step < size; step++, at = at + 1 === size ? 0 : at + 1) {
    const r = replicas[owners[at]!]!;
    if (r !== avoid && r !== home && r.inFlight + r.others + 1 <= limit) {
      chosen = r;
      break;
    }
    if (!home) break;
  }
  // Reached for a new key whose ring replica is busier than another, or when `avoid` is the only
  // replica within bound.
  chosen ??= leastInFlight(set, avoid, key);
  setHome(homes, key, chosen);
  return chosen;
};

function homeOf(homes: Homes, key: number): ReplicaLoad | undefined {
  let r = homes.current.get(key);
  if (r === undefined) {
    r = homes.previous.get(key);
    if (r === undefined) return undefined;
    setHome(homes, key, r);
  }
  return r.gone ? undefined : r;
}

function setHome(homes: Homes, key: number, r: ReplicaLoad): void {
  if (homes.current.size >= HOME_KEYS && !homes.current.has(key)) {
    homes.previous = homes.current;
    homes.current = new Map();
  }
  homes.current.set(key, r);
}

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
  private readonly addresses: (id: string) => readonly string[];
  /** The OpenAI API's path on a replica. */
  private readonly basePath: string;
  private readonly byEndpoint = new Map<
    string,
    { source: readonly string[]; set: ReplicaSet; byAddress: Map<string, ReplicaLoad> }
  >();

  constructor(addresses: (id: string) => readonly string[], basePath: string) {
    this.addresses = addresses;
    this.basePath = basePath;
  }

  /** The endpoint's current replica set (empty when none is Ready). */
  of(id: string): ReplicaSet {
    const source = this.addresses(id);
    let entry = this.byEndpoint.get(id);
    if (entry?.source === source) return entry.set;
    if (!source.length) {
      if (entry) for (const r of entry.byAddress.values()) r.gone = true;
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
    if (previous) for (const [address, r] of previous) if (!byAddress.has(address)) r.gone = true;
    const set: ReplicaSet = { replicas: [...byAddress.values()], turn: entry?.set.turn ?? 0 };
    if (entry?.set.homes) set.homes = entry.set.homes;
    entry = { source, set, byAddress };
    this.byEndpoint.set(id, entry);
    return entry.set;
  }
}

const EMPTY: ReplicaSet = { replicas: [], turn: 0 };
