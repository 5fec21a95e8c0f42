// API keys: creation, verification on the request path, listing and immediate revocation.
//
// Verification of a warm key costs no database query: verified keys are cached by hash while the
// revocation bus is healthy. A revocation evicts the key on every replica and aborts requests in
// flight that were authenticated with it, before DELETE returns.
import { ApiError } from '../errors.ts';
import { quotaExceeded } from '../quotas.ts';
import type { Identity, KeyRecord, KeyRepository, NewKey, Scope } from '../repositories/keys.ts';
import type { RevocationBus } from './revocation-bus.ts';
import {
  displayPrefix,
  generateKeyValue,
  isWellFormedKey,
  newId,
  sameDigest,
  type KeyHasher,
} from './format.ts';

/** What the request path knows about a verified key. */
/** What a revocation of its key ends, told directly (a proxied call's scope, ../proxy/scope.ts). */
export interface Revocable {
  revoke(reason: unknown): void;
}

/** A request tied to its key (KeyService.track). */
export interface TrackedCall {
  /**
   * Aborts, with 401 `Invalid API key` as its reason, when the key is revoked. Made when first read:
   * a proxied call links its scope instead (`link`) and never makes one.
   */
  readonly signal: AbortSignal;
  /** Tells `target` of a revocation (at once if the key was already revoked); undefined: no longer. */
  link(target: Revocable | undefined): void;
  release(): void;
}

/** One tracked request: no AbortController unless its signal is read. */
class Tracked implements TrackedCall, Revocable {
  private controller: AbortController | undefined;
  private reason: unknown;
  private linked: Revocable | undefined;

  constructor(
    readonly keyId: string,
    private readonly calls: Map<string, Set<Tracked>>,
  ) {}

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.reason !== undefined) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  link(target: Revocable | undefined): void {
    this.linked = target;
    if (target && this.reason !== undefined) target.revoke(this.reason);
  }

  revoke(reason: unknown): void {
    if (this.reason !== undefined) return;
    this.reason = reason;
    this.controller?.abort(reason);
    this.linked?.revoke(reason);
  }

  release(): void {
    const s = this.calls.get(this.keyId);
    if (!s) return;
    s.delete(this);
    if (s.size === 0) this.calls.delete(this.keyId);
  }
}

export interface Principal {
  keyId: string;
  accountId: string;
  scope: Scope;
  pinnedModel: string | null;
  toolPin: string[];
}

export type VerifyResult = { ok: true; principal: Principal } | { ok: false; code: 'invalid_api_key' };

export interface CreatedKey extends KeyRecord {
  value: string;
}

export interface KeyServiceMetrics {
  /** `stale`: the database was unavailable and the key was verified before the outage began. */
  cacheLookup(result: 'hit' | 'miss' | 'stale'): void;
  /** `confirmed`: every replica acknowledged; `unconfirmed`: some did not within the timeout. */
  revocation(outcome: 'confirmed' | 'unconfirmed'): void;
}

export interface KeyService {
  verify(value: string): Promise<VerifyResult>;
  createAccount(
    name: string,
  ): Promise<{ account: { id: string; name: string; createdAt: Date }; key: CreatedKey }>;
  /**
   * The dashboard's signup: the account an identity signs in to, created with its default key on
   * the identity's first sign-in (`key` is set only then: its value is shown once).
   */
  signIn(
    identity: Identity,
    name: string,
  ): Promise<{ account: { id: string; name: string; createdAt: Date }; key?: CreatedKey }>;
  findAccount(id: string): Promise<{ id: string; name: string; createdAt: Date } | null>;
  /**
   * The key a dashboard session's inference call acts as: the account's oldest active key that may
   * call inference (spec §5.3). Read from the database on every call, so a revocation applies at once.
   */
  sessionPrincipal(accountId: string): Promise<Principal | null>;
  /** Within the account's active-key quota (403 `quota_exceeded` beyond it). */
  createKey(input: {
    accountId: string;
    name: string;
    scope: Scope;
    pinnedModel?: string | null;
    toolPin?: string[];
  }): Promise<CreatedKey>;
  /** The platform operator's (admin) creation: null when the account does not exist; no quota. */
  createKeyForAccount(
    accountId: string,
    input: { name: string; scope: Scope; pinnedModel?: string | null; toolPin?: string[] },
  ): Promise<CreatedKey | null>;
  list(accountId: string): Promise<KeyRecord[]>;
  /**
   * One page of the account's keys, oldest first: up to `limit` after the key `after`, and whether
   * more follow. Null when the account has no key `after`.
   */
  page(
    accountId: string,
    page: { limit: number; after?: string },
  ): Promise<{ keys: KeyRecord[]; hasMore: boolean } | null>;
  /** Null when the account has no such key. */
  revoke(accountId: string, keyId: string): Promise<KeyRecord | null>;
  /**
   * Ties a request to its key: revoking the key aborts it (reason: 401 `Invalid API key`). Call
   * `release` when the request ends.
   */
  track(keyId: string): TrackedCall;
  /** Writes pending last-used times now (also done periodically and at close). */
  flush(): Promise<void>;
  close(): Promise<void>;
}

const MAX_CACHED = 100_000;

/** Scopes that may call inference (spec §5.4): a session needs an active key with one of them. */
export const INFERENCE_SCOPES = ['inference', 'global'] as const satisfies readonly Scope[];

export function keyService(deps: {
  repo: KeyRepository;
  hash: KeyHasher;
  bus: RevocationBus;
  metrics?: KeyServiceMetrics;
  touchIntervalMs: number;
  /**
   * Active keys one account may hold through `createKey`, unless the account has its own limit
   * (unlimited when absent).
   */
  keyQuota?: number;
  /**
   * How long keys verified before the revocation bus lost the database stay usable while the
   * database cannot be reached (0: not at all). See `verify`.
   */
  outageGraceMs?: number;
  /** Whether an error means the database is unavailable (rather than a bug). */
  isOutage?: (err: unknown) => boolean;
  now?: () => Date;
}): KeyService {
  const { repo, hash, bus } = deps;
  const now = deps.now ?? (() => new Date());
  const cache = new Map<string, Principal>();
  // The cache as it was when the bus lost its connection, and since when. Used only while the
  // database itself cannot be reached: then no replica can revoke a key either (revoking writes the
  // row first), so a key that was valid when the outage began is still valid — except on a replica
  // cut off alone (a partition), which is why it is bounded by `outageGraceMs` and the replica
  // reports itself unready (its load balancer drains it) meanwhile.
  let stale = new Map<string, Principal>();
  let staleSince = 0;
  // After a lookup found the database unavailable, stale keys are served without asking it again
  // for a moment: a dead server must not add a connection attempt to every request.
  let skipDatabaseUntil = 0;
  const outageGraceMs = deps.outageGraceMs ?? 0;
  const staleKey = (digest: string): Principal | undefined =>
    outageGraceMs > 0 && Date.now() - staleSince < outageGraceMs ? stale.get(digest) : undefined;
  // Bumped by every eviction: a lookup that started before one must not fill the cache, or a key
  // revoked while its row was being read could come back.
  let epoch = 0;
  const inflight = new Map<string, Set<Tracked>>();
  let lastUsed = new Map<string, Date>();

  const evict = (keyId: string, keyHash?: string) => {
    epoch++;
    for (const map of [cache, stale]) {
      if (keyHash) map.delete(keyHash);
      else for (const [h, p] of map) if (p.keyId === keyId) map.delete(h);
    }
    const calls = inflight.get(keyId);
    if (calls) {
      for (const c of calls) c.revoke(new ApiError('invalid_api_key'));
      inflight.delete(keyId);
    }
  };
  bus.onRevoked((rev) => evict(rev.keyId, rev.hash));
  bus.onReset(() => {
    epoch++;
    // Only what was trusted a moment ago: keys from an earlier outage may have been revoked since.
    stale = new Map(cache);
    staleSince = Date.now();
    cache.clear();
  });

  const flush = async () => {
    if (lastUsed.size === 0) return;
    const batch = lastUsed;
    lastUsed = new Map();
    await repo.touch(batch);
  };
  const timer = setInterval(() => void flush().catch(() => {}), deps.touchIntervalMs);
  timer.unref();

  const materialize = (input: {
    accountId: string;
    name: string;
    scope: Scope;
    pinnedModel?: string | null;
    toolPin?: string[];
  }): { key: NewKey; value: string } => {
    const value = generateKeyValue();
    return {
      value,
      key: {
        id: newId('key'),
        accountId: input.accountId,
        name: input.name,
        scope: input.scope,
        hash: hash(value),
        prefix: displayPrefix(value),
        pinnedModel: input.pinnedModel ?? null,
        toolPin: input.toolPin ?? [],
      },
    };
  };

  return {
    async verify(value) {
      if (!isWellFormedKey(value)) return { ok: false, code: 'invalid_api_key' };
      const digest = hash(value);
      const useCache = bus.healthy;
      const cached = useCache ? cache.get(digest) : undefined;
      if (cached) {
        deps.metrics?.cacheLookup('hit');
        lastUsed.set(cached.keyId, now());
        return { ok: true, principal: cached };
      }
      const fallback = useCache ? undefined : staleKey(digest);
      if (fallback && Date.now() < skipDatabaseUntil) {
        deps.metrics?.cacheLookup('stale');
        return { ok: true, principal: fallback };
      }
      deps.metrics?.cacheLookup('miss');
      const started = epoch;
      let row: Awaited<ReturnType<KeyRepository['findByHash']>>;
      try {
        row = await repo.findByHash(digest);
      } catch (err) {
        if (!fallback || !deps.isOutage?.(err)) throw err;
        skipDatabaseUntil = Date.now() + 1_000;
        deps.metrics?.cacheLookup('stale');
        return { ok: true, principal: fallback };
      }
      if (!row || row.revokedAt || !sameDigest(row.hash, digest))
        return { ok: false, code: 'invalid_api_key' };
      const principal: Principal = {
        keyId: row.id,
        accountId: row.accountId,
        scope: row.scope,
        pinnedModel: row.pinnedModel,
        toolPin: row.toolPin,
      };
      if (useCache && bus.healthy && epoch === started) {
        if (cache.size >= MAX_CACHED) cache.delete(cache.keys().next().value!);
        cache.set(digest, principal);
      }
      lastUsed.set(row.id, now());
      return { ok: true, principal };
    },

    async createAccount(name) {
      const accountId = newId('acct');
      const { key, value } = materialize({ accountId, name: 'default', scope: 'inference' });
      const created = await repo.createAccountWithKey({ id: accountId, name }, key);
      if (!created) throw new Error('account creation without an identity cannot conflict');
      return { account: created.account, key: { ...created.key, value } };
    },

    async signIn(identity, name) {
      const existing = await repo.accountOfIdentity(identity);
      if (existing) return { account: existing };
      const accountId = newId('acct');
      const { key, value } = materialize({ accountId, name: 'default', scope: 'inference' });
      const created = await repo.createAccountWithKey({ id: accountId, name }, key, identity);
      if (created) return { account: created.account, key: { ...created.key, value } };
      // A concurrent first sign-in of the same subject created the account: sign in to that one.
      const winner = await repo.accountOfIdentity(identity);
      if (!winner) throw new Error('identity conflict without a linked account');
      return { account: winner };
    },

    findAccount: (id) => repo.findAccount(id),

    async sessionPrincipal(accountId) {
      const row = await repo.firstActiveKey(accountId, INFERENCE_SCOPES);
      return row
        ? {
            keyId: row.id,
            accountId: row.accountId,
            scope: row.scope,
            pinnedModel: row.pinnedModel,
            toolPin: row.toolPin,
          }
        : null;
    },

    async createKey(input) {
      const { key, value } = materialize(input);
      if (deps.keyQuota === undefined) return { ...(await repo.createKey(key)), value };
      const result = await repo.createKeyWithin(key, deps.keyQuota);
      if (!result.created) throw quotaExceeded('keys', result.active, result.active + 1, result.limit);
      return { ...result.key, value };
    },

    async createKeyForAccount(accountId, input) {
      if (!(await repo.accountExists(accountId))) return null;
      const { key, value } = materialize({ ...input, accountId });
      return { ...(await repo.createKey(key)), value };
    },

    list: (accountId) => repo.listForAccount(accountId),

    async page(accountId, { limit, after }) {
      const rows = await repo.pageForAccount(accountId, { limit: limit + 1, ...(after ? { after } : {}) });
      return rows && { keys: rows.slice(0, limit), hasMore: rows.length > limit };
    },

    async revoke(accountId, keyId) {
      const result = await repo.revoke(accountId, keyId, now());
      if (!result) return null;
      // Published even when it was already revoked: a replica that missed the first notice
      // (or a retry after a timeout) gets another chance, and it costs nothing.
      evict(result.key.id, result.key.hash);
      const { expected, acknowledged } = await bus.publish({ keyId: result.key.id, hash: result.key.hash });
      deps.metrics?.revocation(acknowledged >= expected ? 'confirmed' : 'unconfirmed');
      const { hash: _, ...key } = result.key;
      return key;
    },

    track(keyId) {
      const call = new Tracked(keyId, inflight);
      let set = inflight.get(keyId);
      if (!set) inflight.set(keyId, (set = new Set()));
      set.add(call);
      return call;
    },

    flush,

    async close() {
      clearInterval(timer);
      await flush().catch(() => {});
    },
  };
}
