// API keys: creation, verification on the request path (./verify.ts), listing, changes, rotation
// (./lifecycle.ts) and immediate revocation.
//
// A revocation evicts the key on every replica and aborts requests in flight that were authenticated
// with it, before DELETE returns; a change or a rotation evicts it too (requests in flight go on).
import { ApiError } from '../../platform/errors.ts';
import { quotaExceeded } from '../quotas.ts';
import type { Identity, KeyRecord, KeyRepository, KeySettings, KeySpend, NewKey } from './repository.ts';
import type { KeyVerifier, Revocable, Scope, TrackedCall, VerifyResult } from '../../http/principal.ts';
import type { RevocationBus } from './revocation-bus.ts';
import { displayPrefix, generateKeyValue, type KeyHasher } from './format.ts';
import { newId } from '../../platform/ids.ts';
import {
  checkSettings,
  DEFAULT_GRACE_SECONDS,
  invalidField,
  keyConflictError,
  MAX_GRACE_SECONDS,
  successor,
  type PinnedModelCheck,
} from './lifecycle.ts';
import { cachingVerifier, principalOf, type KeyVerifierMetrics } from './verify.ts';

/** One tracked request: no AbortController unless its signal is read. */
class Tracked implements TrackedCall, Revocable {
  readonly keyId: string;
  private readonly calls: Map<string, Set<Tracked>>;
  private controller: AbortController | undefined;
  private reason: unknown;
  private linked: Revocable | undefined;

  constructor(keyId: string, calls: Map<string, Set<Tracked>>) {
    this.keyId = keyId;
    this.calls = calls;
  }

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

export interface CreatedKey extends KeyRecord {
  value: string;
}

export interface KeyServiceMetrics extends KeyVerifierMetrics {
  /** `confirmed`: every replica acknowledged; `unconfirmed`: some did not within the timeout. */
  revocation(outcome: 'confirmed' | 'unconfirmed'): void;
}

/** The auth path's KeyVerifier, and the keys and accounts routes' operations. */
export interface KeyService extends KeyVerifier {
  verifyNow(value: string): VerifyResult | undefined;
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
  /** Within the account's active-key quota (403 `quota_exceeded` beyond it). */
  createKey(input: KeyInput & { accountId: string }): Promise<CreatedKey>;
  /** The platform operator's (admin) creation: null when the account does not exist; no quota. */
  createKeyForAccount(accountId: string, input: KeyInput): Promise<CreatedKey | null>;
  /**
   * Changes a key's name and settings (those given), on every replica before it returns. Null when
   * the account has no such key; 409 `key_conflict` when it is revoked, expired or rotated out.
   */
  update(
    accountId: string,
    keyId: string,
    patch: Partial<KeySettings> & { name?: string },
  ): Promise<KeyRecord | null>;
  /**
   * Replaces a key by a new one (its value returned once); the old key keeps working for
   * `graceSeconds` (default 24 h, at most 30 d), then is refused with `api_key_rotated`.
   */
  rotate(
    accountId: string,
    keyId: string,
    options: { graceSeconds?: number; expiresAt?: Date | null },
  ): Promise<{ key: CreatedKey; previous: KeyRecord } | null>;
  /** What keys with a spend limit spent in its current period. */
  spend(accountId: string, keyIds: readonly string[]): Promise<Map<string, KeySpend>>;
  /**
   * Told of every revocation and change of a key, on any replica (billing re-reads its limit); with
   * no key when changes may have been missed (the revocation bus listens again after a loss).
   */
  onChanged(fn: (keyId?: string) => void): void;
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
  /** Writes pending last-used times now (also done periodically and at close). */
  flush(): Promise<void>;
  close(): Promise<void>;
}

/** What a key is created with besides its account. */
export type KeyInput = { name: string; scope: Scope } & Partial<KeySettings>;

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
   * database cannot be reached (0: not at all). See ./verify.ts.
   */
  outageGraceMs?: number;
  /** Whether an error means the database is unavailable (rather than a bug). */
  isOutage?: (err: unknown) => boolean;
  /** Refuses a pinned model nothing serves for the account (absent: not checked). */
  pinnedModel?: PinnedModelCheck;
  now?: () => Date;
}): KeyService {
  const { repo, hash, bus } = deps;
  const now = deps.now ?? (() => new Date());
  const inflight = new Map<string, Set<Tracked>>();
  let lastUsed = new Map<string, Date>();
  const changedHooks: ((keyId?: string) => void)[] = [];
  const verifier = cachingVerifier({
    repo,
    hash,
    bus,
    ...(deps.metrics ? { metrics: deps.metrics } : {}),
    outageGraceMs: deps.outageGraceMs ?? 0,
    ...(deps.isOutage ? { isOutage: deps.isOutage } : {}),
    clock: () => now().getTime(),
    used: (keyId) => lastUsed.set(keyId, now()),
  });

  bus.onRevoked((rev) => {
    verifier.evict(rev.keyId, rev.hash);
    if (rev.kind !== 'changed') {
      const calls = inflight.get(rev.keyId);
      if (calls) {
        for (const c of calls) c.revoke(new ApiError('api_key_revoked'));
        inflight.delete(rev.keyId);
      }
    }
    for (const fn of changedHooks) fn(rev.keyId);
  });
  // Changes missed while the bus was down are read again once it is back — not when it is lost: a
  // replica that cannot reach the database could not read them, and billing would refuse every call
  // with a key it had to forget (its key slices are leases, bounded in time, like the account's).
  bus.onReconnected(() => {
    for (const fn of changedHooks) fn();
  });

  /** Tells every replica (this one first) that the key changed, before the route answers. */
  const publish = async (key: KeyRecord & { hash: string }, kind: 'revoked' | 'changed') => {
    verifier.evict(key.id, key.hash);
    const { expected, acknowledged } = await bus.publish({
      keyId: key.id,
      hash: key.hash,
      ...(kind === 'changed' ? { kind } : {}),
    });
    deps.metrics?.revocation(acknowledged >= expected ? 'confirmed' : 'unconfirmed');
  };

  const flush = async () => {
    if (lastUsed.size === 0) return;
    const batch = lastUsed;
    lastUsed = new Map();
    await repo.touch(batch);
  };
  const timer = setInterval(() => void flush().catch(() => {}), deps.touchIntervalMs);
  timer.unref();

  /** A new key's value, hash and row. */
  const materialize = (input: KeyInput & { accountId: string }): { key: NewKey; value: string } => {
    checkSettings(input.accountId, input, now(), deps.pinnedModel);
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
        expiresAt: input.expiresAt ?? null,
        spendLimit: input.spendLimit ?? null,
        allowDearerFallback: input.allowDearerFallback ?? false,
      },
    };
  };

  return {
    verify: (value) => verifier.verify(value),
    verifyNow: (value) => verifier.verifyNow(value),

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
      return row ? principalOf(row) : null;
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
      await publish(result.key, 'revoked');
      const { hash: _, ...key } = result.key;
      return key;
    },

    async update(accountId, keyId, patch) {
      checkSettings(accountId, patch, now(), deps.pinnedModel);
      const result = await repo.update(accountId, keyId, patch, now(), (current) => {
        if (patch.pinnedModel && current.scope !== 'inference')
          throw invalidField('pinnedModel', 'is only allowed on keys with scope "inference"');
      });
      if (!result) return null;
      if ('conflict' in result) throw keyConflictError(result.key, result.conflict, 'change');
      await publish(result.key, 'changed');
      const { hash: _, ...key } = result.key;
      return key;
    },

    async rotate(accountId, keyId, options) {
      const graceSeconds = options.graceSeconds ?? DEFAULT_GRACE_SECONDS;
      if (!Number.isInteger(graceSeconds) || graceSeconds < 0 || graceSeconds > MAX_GRACE_SECONDS)
        throw invalidField(
          'gracePeriodSeconds',
          `must be a whole number from 0 to ${MAX_GRACE_SECONDS} (30 days)`,
        );
      const at = now();
      if (options.expiresAt) checkSettings(accountId, { expiresAt: options.expiresAt }, at);
      const value = generateKeyValue();
      const made = { id: newId('key'), hash: hash(value), prefix: displayPrefix(value) };
      const result = await repo.rotate(
        accountId,
        keyId,
        (old) => successor(old, made, at, options.expiresAt),
        () => new Date(at.getTime() + graceSeconds * 1000),
        at,
      );
      if (!result) return null;
      if ('conflict' in result) throw keyConflictError(result.key, result.conflict, 'rotate');
      await publish(result.old, 'changed');
      const { hash: _, ...previous } = result.old;
      return { key: { ...result.created, value }, previous };
    },

    spend: (accountId, keyIds) => repo.spend(accountId, keyIds),

    onChanged(fn) {
      changedHooks.push(fn);
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
