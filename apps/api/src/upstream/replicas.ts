// Which replica of an endpoint takes the next attempt. The baseline picker sends it to the replica
// with the fewest requests this API replica has in flight there (ties in turn), per endpoint: the
// old process-wide round robin ignored load and mixed every endpoint's turns together.

/** One replica and the requests this API replica has in flight on it. */
export interface ReplicaLoad {
  /** Its OpenAI base URL (`http://ip:port/v1`). */
  readonly address: string;
  inFlight: number;
}

/** One endpoint's Ready replicas, as a picker sees them. */
export interface ReplicaSet {
  readonly replicas: readonly ReplicaLoad[];
  /** Where the next tie-break starts; pickers may keep their own rotation here. */
  turn: number;
}

/**
 * Chooses a replica from a non-empty set. `avoid` is the replica the call's previous attempt failed
 * on; a picker takes another one when there is one. Pickers run on every attempt: O(replicas), no
 * allocation.
 */
export type ReplicaPicker = (set: ReplicaSet, avoid: ReplicaLoad | undefined) => ReplicaLoad;

export const leastInFlight: ReplicaPicker = (set, avoid) => {
  const { replicas } = set;
  const n = replicas.length;
  const start = set.turn++ % n;
  let best: ReplicaLoad | undefined;
  for (let i = 0; i < n; i++) {
    const r = replicas[(start + i) % n]!;
    if (r === avoid && n > 1) continue;
    if (!best || r.inFlight < best.inFlight) best = r;
  }
  return best!;
};

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
      byAddress.set(address, previous?.get(address) ?? { address, inFlight: 0 });
    }
    entry = { source, set: { replicas: [...byAddress.values()], turn: entry?.set.turn ?? 0 }, byAddress };
    this.byEndpoint.set(id, entry);
    return entry.set;
  }
}

const EMPTY: ReplicaSet = { replicas: [], turn: 0 };
