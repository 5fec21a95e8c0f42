// Data access for accounts and API keys. Prisma is imported only in repository modules: routes,
// the auth path and the proxy see these narrow interfaces.
import { Prisma, type PrismaClient } from '@berth/db';

export type Scope = 'inference' | 'compute' | 'global';
export const SCOPES = ['inference', 'compute', 'global'] as const satisfies readonly Scope[];

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
}

export interface NewKey {
  id: string;
  accountId: string;
  name: string;
  scope: Scope;
  hash: string;
  prefix: string;
  pinnedModel: string | null;
  toolPin: string[];
}

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
} as const;

export function keyRepository(prisma: PrismaClient): KeyRepository {
  return {
    async createAccountWithKey(account, key, identity) {
      try {
        const created = await prisma.account.create({
          data: {
            ...account,
            apiKeys: { create: { ...withoutAccount(key) } },
            ...(identity ? { identities: { create: identity } } : {}),
          },
          select: { id: true, name: true, createdAt: true, apiKeys: { select: keyColumns } },
        });
        const { apiKeys, ...acc } = created;
        return { account: acc, key: apiKeys[0]! };
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
    firstActiveKey(accountId, scopes) {
      return prisma.apiKey.findFirst({
        where: { accountId, revokedAt: null, scope: { in: [...scopes] } },
        select: keyColumns,
        orderBy: { createdAt: 'asc' },
      });
    },
    createKey(key) {
      return prisma.apiKey.create({ data: key, select: keyColumns });
    },
    createKeyWithin(key, defaultLimit) {
      return prisma.$transaction(async (tx) => {
        const [account] = await tx.$queryRaw<{ quota_keys: number | null }[]>`
          SELECT quota_keys FROM accounts WHERE id = ${key.accountId} FOR UPDATE`;
        const limit = account?.quota_keys ?? defaultLimit;
        const active = await tx.apiKey.count({ where: { accountId: key.accountId, revokedAt: null } });
        if (active >= limit) return { created: false as const, active, limit };
        return { created: true as const, key: await tx.apiKey.create({ data: key, select: keyColumns }) };
      });
    },
    findByHash(hash) {
      return prisma.apiKey.findUnique({ where: { hash }, select: { ...keyColumns, hash: true } });
    },
    listForAccount(accountId) {
      return prisma.apiKey.findMany({
        where: { accountId },
        select: keyColumns,
        orderBy: { createdAt: 'asc' },
      });
    },
    async pageForAccount(accountId, { limit, after }) {
      if (after && (await prisma.apiKey.count({ where: { id: after, accountId } })) === 0) return null;
      return prisma.apiKey.findMany({
        where: { accountId },
        select: keyColumns,
        // The id breaks ties between keys created in the same millisecond: pages never overlap.
        orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
        take: limit,
        ...(after ? { cursor: { id: after }, skip: 1 } : {}),
      });
    },
    async revoke(accountId, keyId, at) {
      // The conditional update makes concurrent revocations agree on one revokedAt.
      const { count } = await prisma.apiKey.updateMany({
        where: { id: keyId, accountId, revokedAt: null },
        data: { revokedAt: at },
      });
      const key = await prisma.apiKey.findFirst({
        where: { id: keyId, accountId },
        select: { ...keyColumns, hash: true },
      });
      return key ? { key, changed: count === 1 } : null;
    },
    async touch(lastUsed) {
      if (lastUsed.size === 0) return;
      const rows = [...lastUsed].map(([id, at]) => Prisma.sql`(${id}, ${at}::timestamptz)`);
      await prisma.$executeRaw`
        UPDATE api_keys SET last_used_at = v.at
        FROM (VALUES ${Prisma.join(rows)}) AS v(id, at)
        WHERE api_keys.id = v.id AND (api_keys.last_used_at IS NULL OR api_keys.last_used_at < v.at)`;
    },
  };
}

function withoutAccount(key: NewKey): Omit<NewKey, 'accountId'> {
  const { accountId: _, ...rest } = key;
  return rest;
}

export interface HealthRepository {
  /** Throws unless the database answers and holds this version's schema. */
  ping(): Promise<void>;
}

/**
 * `latestMigration`: the newest migration this build ships. A database that answers but lacks it
 * (dropped and re-created empty, or restored from an old backup) is not ready: every call would fail.
 */
export function healthRepository(prisma: PrismaClient, latestMigration?: string): HealthRepository {
  return {
    async ping() {
      if (!latestMigration) {
        await prisma.$queryRaw`SELECT 1`;
        return;
      }
      const rows = await prisma.$queryRaw<unknown[]>`
        SELECT 1 FROM _prisma_migrations
        WHERE migration_name = ${latestMigration} AND finished_at IS NOT NULL AND rolled_back_at IS NULL`;
      if (!rows.length)
        throw new Error(
          `schema out of date: migration ${latestMigration} is not applied (restart the API to apply migrations)`,
        );
    },
  };
}
