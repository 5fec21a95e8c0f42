// Data access for accounts and API keys. Prisma is imported only in repository modules: routes,
// the auth path and the proxy see these narrow interfaces.
import { Prisma, type PrismaClient } from '@berth/db';

import type { Scope } from '../../http/principal.ts';

export type SpendPeriod = 'day' | 'week' | 'month';
export const SPEND_PERIODS = ['day', 'week', 'month'] as const satisfies readonly SpendPeriod[];

/** At most `amount` micro-units per `period` (UTC day, ISO week from Monday, calendar month). */
export interface SpendLimit {
  amount: bigint;
  period: SpendPeriod;
}

export interface AccountRecord {
  id: string;
  name: string;
  createdAt: Date;
}

export interface KeyRecord {
  id: string;
  accountId: string;
  name: string;
  scope: Scope;
  prefix: string;
  pinnedModel: string | null;
  toolPin: string[];
  createdAt: Date;
  lastUsedAt: Date | null;
  revokedAt: Date | null;
  /** Refused from then on. */
  expiresAt: Date | null;
  /** Rotated: the key that replaced it, and the end of its grace period. */
  replacedBy: string | null;
  graceExpiresAt: Date | null;
  /** The key it replaced. */
  rotatedFrom: string | null;
  /** The first key of its rotation line (null: itself); a spend limit counts the whole line. */
  lineage: string | null;
  spendLimit: SpendLimit | null;
  allowDearerFallback: boolean;
}

/** The settings a key is created with, or changed to (PATCH), besides name and scope. */
export interface KeySettings {
  pinnedModel: string | null;
  toolPin: string[];
  expiresAt: Date | null;
  spendLimit: SpendLimit | null;
  allowDearerFallback: boolean;
}

export interface NewKey extends KeySettings {
  id: string;
  accountId: string;
  name: string;
  scope: Scope;
  hash: string;
  prefix: string;
  lineage?: string;
  rotatedFrom?: string;
}

/** What a key spent in its limit's current period (written with each billing flush). */
export interface KeySpend {
  spent: bigint;
  periodStart: Date;
  periodEnd: Date;
}

/** Why a key cannot be changed or rotated. */
export type KeyConflict = 'revoked' | 'expired' | 'rotated';

/** An OpenID Connect subject that signs in to an account. */
export interface Identity {
  issuer: string;
  subject: string;
}

export interface KeyRepository {
  /**
   * The account, its default key and, for a dashboard signup, the identity that signs in to it, in
   * one transaction. With an identity that is already linked (a concurrent signup won), null.
   */
  createAccountWithKey(
    account: { id: string; name: string },
    key: NewKey,
    identity?: Identity,
  ): Promise<{ account: AccountRecord; key: KeyRecord } | null>;
  accountExists(id: string): Promise<boolean>;
  /** The account an identity signs in to. */
  accountOfIdentity(identity: Identity): Promise<AccountRecord | null>;
  findAccount(id: string): Promise<AccountRecord | null>;
  /** The account's oldest active key with one of these scopes. */
  firstActiveKey(accountId: string, scopes: readonly Scope[]): Promise<KeyRecord | null>;
  createKey(key: NewKey): Promise<KeyRecord>;
  /**
   * Creates the key unless the account already has as many active keys as its limit — its own
   * override, else `defaultLimit` — (then `created: false`, how many it has and the limit). The
   * account's row is locked meanwhile, so concurrent creations, on any replica, cannot together go
   * past the limit.
   */
  createKeyWithin(
    key: NewKey,
    defaultLimit: number,
  ): Promise<{ created: true; key: KeyRecord } | { created: false; active: number; limit: number }>;
  /** The key with this hash, revoked or not. */
  findByHash(hash: string): Promise<(KeyRecord & { hash: string }) | null>;
  listForAccount(accountId: string): Promise<KeyRecord[]>;
  /**
   * Up to `limit` of the account's keys, oldest first, after the key `after`; null when the account
   * has no key `after`.
   */
  pageForAccount(accountId: string, page: { limit: number; after?: string }): Promise<KeyRecord[] | null>;
  /**
   * Revokes the account's key. `changed` is false when it was already revoked (revocation is
   * idempotent and keeps the first time). Null when the account has no such key.
   */
  revoke(
    accountId: string,
    keyId: string,
    at: Date,
  ): Promise<{ key: KeyRecord & { hash: string }; changed: boolean } | null>;
  /** Writes last-used times in one statement. */
  touch(lastUsed: ReadonlyMap<string, Date>): Promise<void>;
  /**
   * Changes a key's name and settings (only those given). Null when the account has no such key; a
   * conflict when it can no longer be used (revoked, expired, or rotated past its grace).
   */
  update(
    accountId: string,
    keyId: string,
    patch: Partial<KeySettings> & { name?: string },
    now: Date,
    /** Refuses the change (by throwing) given the key as it is; nothing is written then. */
    check?: (current: KeyRecord) => void,
  ): Promise<{ key: KeyRecord & { hash: string } } | { conflict: KeyConflict; key: KeyRecord } | null>;
  /**
   * Replaces a key by `next` (created with the old key's name, scope and settings unless `next` says
   * otherwise, in its rotation line); the old key works until `graceExpiresAt`. One transaction,
   * under the old key's row lock: a key is rotated once.
   */
  rotate(
    accountId: string,
    keyId: string,
    next: (old: KeyRecord) => NewKey,
    graceExpiresAt: (old: KeyRecord) => Date,
    now: Date,
  ): Promise<
    | { old: KeyRecord & { hash: string }; created: KeyRecord }
    | { conflict: KeyConflict; key: KeyRecord }
    | null
  >;
  /** The current period's spend of the account's keys with a limit, by key id. */
  spend(accountId: string, keyIds: readonly string[]): Promise<Map<string, KeySpend>>;
}

const keyColumns = {
  id: true,
  accountId: true,
  name: true,
  scope: true,
  prefix: true,
  pinnedModel: true,
  toolPin: true,
  createdAt: true,
  lastUsedAt: true,
  revokedAt: true,
  expiresAt: true,
  replacedBy: true,
  graceExpiresAt: true,
  rotatedFrom: true,
  lineage: true,
  spendLimit: true,
  spendPeriod: true,
  allowDearerFallback: true,
} as const;

type KeyRow = Omit<KeyRecord, 'spendLimit'> & { spendLimit: bigint | null; spendPeriod: SpendPeriod | null };

function toRecord<R extends KeyRow>(row: R): Omit<R, 'spendPeriod' | 'spendLimit'> & KeyRecord {
  const { spendLimit, spendPeriod, ...rest } = row;
  return {
    ...rest,
    spendLimit: spendLimit !== null && spendPeriod ? { amount: spendLimit, period: spendPeriod } : null,
  };
}

/** The row's columns for a key's settings. */
function settingsData(s: Partial<KeySettings>) {
  return {
    ...(s.pinnedModel !== undefined ? { pinnedModel: s.pinnedModel } : {}),
    ...(s.toolPin !== undefined ? { toolPin: s.toolPin } : {}),
    ...(s.expiresAt !== undefined ? { expiresAt: s.expiresAt } : {}),
    ...(s.spendLimit !== undefined
      ? { spendLimit: s.spendLimit?.amount ?? null, spendPeriod: s.spendLimit?.period ?? null }
      : {}),
    ...(s.allowDearerFallback !== undefined ? { allowDearerFallback: s.allowDearerFallback } : {}),
  };
}

/** The row for a new key. */
function newKeyData(key: NewKey) {
  const { spendLimit: _limit, lineage, rotatedFrom, ...rest } = key;
  return {
    ...rest,
    ...settingsData(key),
    ...(lineage ? { lineage } : {}),
    ...(rotatedFrom ? { rotatedFrom } : {}),
  };
}

/** Why a key can no longer be used at `now`, if it cannot. */
export function keyConflict(k: KeyRecord, now: Date): KeyConflict | undefined {
  if (k.revokedAt) return 'revoked';
  if (k.replacedBy && k.graceExpiresAt && k.graceExpiresAt <= now) return 'rotated';
  if (k.expiresAt && k.expiresAt <= now) return 'expired';
  return undefined;
}

/** Usable at `now`: not revoked, expired, or rotated past its grace. */
const usable = (now: Date) => ({
  revokedAt: null,
  OR: [{ expiresAt: null }, { expiresAt: { gt: now } }],
  AND: [{ OR: [{ graceExpiresAt: null }, { graceExpiresAt: { gt: now } }] }],
});

const withHash = { ...keyColumns, hash: true } as const;

/** The account's key, its row locked until the transaction ends (null: no such key). */
async function locked(tx: Prisma.TransactionClient, accountId: string, keyId: string) {
  const [row] = await tx.$queryRaw<{ id: string }[]>`
    SELECT id FROM api_keys WHERE id = ${keyId} AND account_id = ${accountId} FOR UPDATE`;
  if (!row) return null;
  return toRecord((await tx.apiKey.findUnique({ where: { id: keyId }, select: withHash }))!);
}

export function keyRepository(prisma: PrismaClient): KeyRepository {
  return {
    async createAccountWithKey(account, key, identity) {
      try {
        const created = await prisma.account.create({
          data: {
            ...account,
            apiKeys: { create: { ...withoutAccount(newKeyData(key)) } },
            ...(identity ? { identities: { create: identity } } : {}),
          },
          select: { id: true, name: true, createdAt: true, apiKeys: { select: keyColumns } },
        });
        const { apiKeys, ...acc } = created;
        return { account: acc, key: toRecord(apiKeys[0]!) };
      } catch (err) {
        if (identity && err instanceof Prisma.PrismaClientKnownRequestError && err.code === 'P2002')
          return null;
        throw err;
      }
    },
    async accountExists(id) {
      return (await prisma.account.count({ where: { id } })) > 0;
    },
    async accountOfIdentity({ issuer, subject }) {
      const row = await prisma.accountIdentity.findUnique({
        where: { issuer_subject: { issuer, subject } },
        select: { account: { select: { id: true, name: true, createdAt: true } } },
      });
      return row?.account ?? null;
    },
    findAccount(id) {
      return prisma.account.findUnique({ where: { id }, select: { id: true, name: true, createdAt: true } });
    },
    async firstActiveKey(accountId, scopes) {
      // A key not rotated first: one in its grace period stops working soon.
      const row = await prisma.apiKey.findFirst({
        where: { accountId, scope: { in: [...scopes] }, ...usable(new Date()) },
        select: keyColumns,
        orderBy: [{ replacedBy: { sort: 'asc', nulls: 'first' } }, { createdAt: 'asc' }],
      });
      return row && toRecord(row);
    },
    async createKey(key) {
      return toRecord(await prisma.apiKey.create({ data: newKeyData(key), select: keyColumns }));
    },
    createKeyWithin(key, defaultLimit) {
      return prisma.$transaction(async (tx) => {
        const [account] = await tx.$queryRaw<{ quota_keys: number | null }[]>`
          SELECT quota_keys FROM accounts WHERE id = ${key.accountId} FOR UPDATE`;
        const limit = account?.quota_keys ?? defaultLimit;
        // Keys in their grace period after a rotation do not count: the rotation replaced them.
        const active = await tx.apiKey.count({
          where: { accountId: key.accountId, replacedBy: null, ...usable(new Date()) },
        });
        if (active >= limit) return { created: false as const, active, limit };
        const created = await tx.apiKey.create({ data: newKeyData(key), select: keyColumns });
        return { created: true as const, key: toRecord(created) };
      });
    },
    async findByHash(hash) {
      const row = await prisma.apiKey.findUnique({ where: { hash }, select: withHash });
      return row && toRecord(row);
    },
    async listForAccount(accountId) {
      const rows = await prisma.apiKey.findMany({
        where: { accountId },
        select: keyColumns,
        orderBy: { createdAt: 'asc' },
      });
      return rows.map(toRecord);
    },
    async pageForAccount(accountId, { limit, after }) {
      if (after && (await prisma.apiKey.count({ where: { id: after, accountId } })) === 0) return null;
      const rows = await prisma.apiKey.findMany({
        where: { accountId },
        select: keyColumns,
        // The id breaks ties between keys created in the same millisecond: pages never overlap.
        orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
        take: limit,
        ...(after ? { cursor: { id: after }, skip: 1 } : {}),
      });
      return rows.map(toRecord);
    },
    async revoke(accountId, keyId, at) {
      // The conditional update makes concurrent revocations agree on one revokedAt.
      const { count } = await prisma.apiKey.updateMany({
        where: { id: keyId, accountId, revokedAt: null },
        data: { revokedAt: at },
      });
      const key = await prisma.apiKey.findFirst({ where: { id: keyId, accountId }, select: withHash });
      return key ? { key: toRecord(key), changed: count === 1 } : null;
    },
    async touch(lastUsed) {
      if (lastUsed.size === 0) return;
      const rows = [...lastUsed].map(([id, at]) => Prisma.sql`(${id}, ${at}::timestamptz)`);
      await prisma.$executeRaw`
        UPDATE api_keys SET last_used_at = v.at
        FROM (VALUES ${Prisma.join(rows)}) AS v(id, at)
        WHERE api_keys.id = v.id AND (api_keys.last_used_at IS NULL OR api_keys.last_used_at < v.at)`;
    },
    update(accountId, keyId, patch, now, check) {
      return prisma.$transaction(async (tx) => {
        const current = await locked(tx, accountId, keyId);
        if (!current) return null;
        const conflict = keyConflict(current, now);
        if (conflict) return { conflict, key: current };
        check?.(current);
        const { name, ...settings } = patch;
        const row = await tx.apiKey.update({
          where: { id: keyId },
          data: { ...(name !== undefined ? { name } : {}), ...settingsData(settings) },
          select: withHash,
        });
        return { key: toRecord(row) };
      });
    },
    rotate(accountId, keyId, next, graceExpiresAt, now) {
      return prisma.$transaction(async (tx) => {
        const old = await locked(tx, accountId, keyId);
        if (!old) return null;
        const conflict = old.replacedBy ? 'rotated' : keyConflict(old, now);
        if (conflict) return { conflict, key: old };
        const key = next(old);
        const created = await tx.apiKey.create({ data: newKeyData(key), select: keyColumns });
        const updated = await tx.apiKey.update({
          where: { id: keyId },
          data: { replacedBy: key.id, graceExpiresAt: graceExpiresAt(old) },
          select: withHash,
        });
        return { old: toRecord(updated), created: toRecord(created) };
      });
    },
    async spend(accountId, keyIds) {
      if (!keyIds.length) return new Map();
      const rows = await prisma.$queryRaw<({ id: string } & KeySpend)[]>`
        SELECT k.id, COALESCE(s.spent, 0)::bigint AS spent,
          berth_period_start(k.spend_period, now()) AS "periodStart",
          berth_period_end(k.spend_period, now()) AS "periodEnd"
        FROM api_keys k
        LEFT JOIN key_spend s ON s.lineage = COALESCE(k.lineage, k.id) AND s.period = k.spend_period
          AND s.period_start = berth_period_start(k.spend_period, now())
        WHERE k.account_id = ${accountId} AND k.spend_limit IS NOT NULL AND k.id IN (${Prisma.join([...keyIds])})`;
      return new Map(rows.map(({ id, ...spend }) => [id, spend]));
    },
  };
}

function withoutAccount<T extends { accountId: string }>(key: T): Omit<T, 'accountId'> {
  const { accountId: _, ...rest } = key;
  return rest;
}
