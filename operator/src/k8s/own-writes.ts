import type { KubernetesObject } from '@kubernetes/client-node';

// Read your own writes. An informer shows a write of ours only once its watch event arrives, which
// is after the write's answer, often after the next pass has already started. A pass that read the
// older object would decide again on what it already did: write the same status again, record the
// same Event twice, re-apply a Deployment it just created. So the answer of each write is kept here
// and served instead of the informer's object until the watch catches up; and the watch event that
// only brings our own write back (the same resourceVersion) is an echo, not a change to act on.
//
// Resource versions are compared only for equality, and for order only where both are decimal
// integers (etcd's revisions); where they cannot be ordered, any newer watch event wins.

const DELETED = '\0deleted';

export class OwnWrites<T extends KubernetesObject> {
  /** The answer of our last write per key, while the informer has not delivered it. */
  private readonly own = new Map<string, T>();
  /** Per key, the resource versions the watch delivered while a write was in flight. */
  private readonly inFlight = new Map<string, Set<Set<string>>>();

  get size(): number {
    return this.own.size;
  }

  /**
   * Runs one write of the object at `key` and keeps its answer (the object as written), unless the
   * watch already delivered it or something newer while the write was in flight.
   */
  async write<R extends T>(key: string, write: () => Promise<R>): Promise<R> {
    const seen = new Set<string>();
    let sets = this.inFlight.get(key);
    if (!sets) this.inFlight.set(key, (sets = new Set()));
    sets.add(seen);
    try {
      const answer = await write();
      const rv = answer?.metadata?.resourceVersion;
      if (rv && !seen.has(DELETED) && ![...seen].some((s) => s === rv || isOlder(rv, s))) {
        const current = this.own.get(key)?.metadata?.resourceVersion;
        if (!current || isOlder(current, rv)) this.own.set(key, answer);
      }
      return answer;
    } finally {
      sets.delete(seen);
      if (!sets.size) this.inFlight.delete(key);
    }
  }

  /**
   * The watch delivered `obj` (added or modified) for `key`. True when it is the echo of our own
   * write, already served to passes: nothing new to reconcile.
   */
  delivered(key: string, obj: T): boolean {
    const rv = obj.metadata?.resourceVersion ?? '';
    for (const seen of this.inFlight.get(key) ?? []) seen.add(rv);
    const own = this.own.get(key);
    if (!own) return false;
    const ownRv = own.metadata?.resourceVersion ?? '';
    if (rv === ownRv) {
      this.own.delete(key);
      return true;
    }
    // An older event (someone else's write before ours) keeps ours; anything else supersedes it.
    if (!isOlder(rv, ownRv)) this.own.delete(key);
    return false;
  }

  /** The watch saw the object deleted. */
  deleted(key: string): void {
    for (const seen of this.inFlight.get(key) ?? []) seen.add(DELETED);
    this.own.delete(key);
  }

  /** The fresher of the informer's object and our own last write. */
  get(key: string, informed: T | undefined): T | undefined {
    return this.own.get(key) ?? informed;
  }
}

/** a < b, where both are decimal integers; false where they cannot be ordered. */
export function isOlder(a: string, b: string): boolean {
  if (!/^\d+$/.test(a) || !/^\d+$/.test(b)) return false;
  return a.length !== b.length ? a.length < b.length : a < b;
}
