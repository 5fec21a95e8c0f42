// Verifying a key on the request path. A warm key costs no database query: verified keys are cached
// by hash while the revocation bus is healthy, each with the time it stops working (its expiry, or
// the end of its grace period after a rotation), so every replica refuses it from that moment on its
// own. A revocation or a change evicts the key on every replica before its route answers; a lookup
// that was reading the key's row meanwhile reads it again, so no call is authenticated with a key
// after its revocation returned.
import type { KeyRefusal, Principal, VerifyResult } from '../../http/principal.ts';
import { ApiError } from '../../platform/errors.ts';
import type { KeyRecord, KeyRepository } from './repository.ts';
import type { RevocationBus } from './revocation-bus.ts';
import { isWellFormedKey, sameDigest, type KeyHasher } from './format.ts';

const MAX_CACHED = 100_000;
const INVALID: VerifyResult = Object.freeze({ ok: false, code: 'invalid_api_key' });
/** A lookup evicted while it read is read again, at most this many times (then 503: retry). */
const MAX_REREADS = 8;

interface Cached {
  principal: Principal;
  /** Milliseconds (the service's clock) from which the key is refused, and why. */
  notAfter?: number;
  after?: KeyRefusal;
}

export interface KeyVerifierMetrics {
  /** `stale`: the database was unavailable and the key was verified before the outage began. */
  cacheLookup(result: 'hit' | 'miss' | 'stale'): void;
}

export interface CachingVerifier {
  verify(value: string): Promise<VerifyResult>;
  /** verify()'s answer when it needs no database read, at once; undefined when it does. */
  verifyNow(value: string): VerifyResult | undefined;
  /** Forget a key everywhere in this replica's caches (a revocation, a change). */
  evict(keyId: string, keyHash?: string): void;
}

/** When a key stops working, and the code it is refused with then (undefined: never). */
export function keyDeadline(k: KeyRecord): { at: number; code: KeyRefusal } | undefined {
  const grace = k.replacedBy && k.graceExpiresAt ? k.graceExpiresAt.getTime() : Infinity;
  const expiry = k.expiresAt ? k.expiresAt.getTime() : Infinity;
  if (grace === Infinity && expiry === Infinity) return undefined;
  return grace <= expiry ? { at: grace, code: 'api_key_rotated' } : { at: expiry, code: 'api_key_expired' };
}

export function principalOf(row: KeyRecord): Principal {
  return {
    keyId: row.id,
    accountId: row.accountId,
    scope: row.scope,
    pinnedModel: row.pinnedModel,
    toolPin: row.toolPin,
    allowDearerFallback: row.allowDearerFallback,
  };
}

export function cachingVerifier(deps: {
  repo: Pick<KeyRepository, 'findByHash'>;
  hash: KeyHasher;
  bus: RevocationBus;
  metrics?: KeyVerifierMetrics;
  /** Keys verified before the bus lost the database stay usable this long while it is down. */
  outageGraceMs: number;
  isOutage?: (err: unknown) => boolean;
  /** Milliseconds. */
  clock: () => number;
  /** The key was used (its last-used time). */
  used(keyId: string): void;
}): CachingVerifier {
  const { repo, hash, bus, clock } = deps;
  const cache = new Map<string, Cached>();
  // The cache as it was when the bus lost its connection, and since when. Used only while the
  // database itself cannot be reached: then no replica can revoke a key either (revoking writes the
  // row first), so a key that was valid when the outage began is still valid — except on a replica
  // cut off alone (a partition), which is why it is bounded by `outageGraceMs` and the replica
  // reports itself unready (its load balancer drains it) meanwhile.
  let stale = new Map<string, Cached>();
  let staleSince = 0;
  // After a lookup found the database unavailable, stale keys are served without asking it again
  // for a moment: a dead server must not add a connection attempt to every request.
  let skipDatabaseUntil = 0;
  // Bumped by every eviction: a lookup that started before one must not fill the cache, or a key
  // revoked while its row was being read could come back.
  let epoch = 0;
  // Lookups reading a key's row now, by hash: an eviction of that key marks them, and they read again.
  const reading = new Map<string, Set<{ evicted: boolean }>>();

  const staleKey = (digest: string): Cached | undefined =>
    deps.outageGraceMs > 0 && Date.now() - staleSince < deps.outageGraceMs ? stale.get(digest) : undefined;

  /** The cached answer, unless its key has stopped working since (then the refusal). */
  const answer = (map: Map<string, Cached>, digest: string, c: Cached): VerifyResult => {
    if (c.notAfter !== undefined && clock() >= c.notAfter) {
      map.delete(digest);
      return { ok: false, code: c.after! };
    }
    deps.used(c.principal.keyId);
    return { ok: true, principal: c.principal };
  };

  bus.onReset(() => {
    epoch++;
    // Only what was trusted a moment ago: keys from an earlier outage may have been revoked since.
    stale = new Map(cache);
    staleSince = Date.now();
    cache.clear();
  });

  const read = async (digest: string) => {
    const watch = { evicted: false };
    let set = reading.get(digest);
    if (!set) reading.set(digest, (set = new Set()));
    set.add(watch);
    try {
      for (let i = 0; i < MAX_REREADS; i++) {
        watch.evicted = false;
        const row = await repo.findByHash(digest);
        // The key was revoked or changed while its row was read: that row may predate it.
        if (!watch.evicted) return row;
      }
      // Evicted on every read: trust none of them; the caller retries.
      throw new ApiError('service_unavailable', { headers: { 'retry-after': '1' } });
    } finally {
      set.delete(watch);
      if (set.size === 0) reading.delete(digest);
    }
  };

  /** The answer when it needs no database read: a malformed key, or a cached one. */
  const verifyNow = (value: string): VerifyResult | undefined => {
    if (!isWellFormedKey(value)) return INVALID;
    if (!bus.healthy) return undefined;
    const digest = hash(value);
    const cached = cache.get(digest);
    if (!cached) return undefined;
    deps.metrics?.cacheLookup('hit');
    return answer(cache, digest, cached);
  };

  return {
    evict(keyId, keyHash) {
      epoch++;
      for (const map of [cache, stale]) {
        if (keyHash) map.delete(keyHash);
        else for (const [h, c] of map) if (c.principal.keyId === keyId) map.delete(h);
      }
      const marked = keyHash ? [reading.get(keyHash)] : [...reading.values()];
      for (const set of marked) for (const w of set ?? []) w.evicted = true;
    },

    verifyNow,

    async verify(value) {
      const now = verifyNow(value);
      if (now) return now;
      const digest = hash(value);
      const useCache = bus.healthy;
      const fallback = useCache ? undefined : staleKey(digest);
      if (fallback && Date.now() < skipDatabaseUntil) {
        deps.metrics?.cacheLookup('stale');
        return answer(stale, digest, fallback);
      }
      deps.metrics?.cacheLookup('miss');
      const started = epoch;
      let row: Awaited<ReturnType<typeof read>>;
      try {
        row = await read(digest);
      } catch (err) {
        if (!fallback || !deps.isOutage?.(err)) throw err;
        skipDatabaseUntil = Date.now() + 1_000;
        deps.metrics?.cacheLookup('stale');
        return answer(stale, digest, fallback);
      }
      if (!row || !sameDigest(row.hash, digest)) return { ok: false, code: 'invalid_api_key' };
      if (row.revokedAt) return { ok: false, code: 'api_key_revoked' };
      const deadline = keyDeadline(row);
      if (deadline && clock() >= deadline.at) return { ok: false, code: deadline.code };
      const entry: Cached = {
        principal: principalOf(row),
        ...(deadline ? { notAfter: deadline.at, after: deadline.code } : {}),
      };
      if (useCache && bus.healthy && epoch === started) {
        if (cache.size >= MAX_CACHED) cache.delete(cache.keys().next().value!);
        cache.set(digest, entry);
      }
      deps.used(row.id);
      return { ok: true, principal: entry.principal };
    },
  };
}
