// Accounts as the admin lists them: paged in creation order, searched by name.
import type { PrismaClient } from '@berth/db';
import { processAccountLock, type AccountLock, type QuotaOverrides } from './quotas.ts';

// pg_advisory_xact_lock(namespace, hashtext(account id)): "quot", apart from the leadership locks.
const ACCOUNT_LOCK_NAMESPACE = 0x7175_6f74;

/**
 * An account lock shared by every API replica: this process's lock, then a PostgreSQL advisory lock
 * held by a transaction while `fn` runs. `fn` must not use the database (the transaction holds one
 * of the pool's connections, and with the embedded database the only one): it is for writes to
 * Kubernetes.
 */
export function databaseAccountLock(prisma: PrismaClient, maxHoldMs = 120_000): AccountLock {
  const local = processAccountLock();
  return (accountId, fn) =>
    local(accountId, () =>
      prisma.$transaction(
        async (tx) => {
          await tx.$queryRaw`SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(${ACCOUNT_LOCK_NAMESPACE}::int, hashtext(${accountId}))) AS l`;
          return fn();
        },
        { timeout: maxHoldMs, maxWait: 30_000 },
      ),
    );
}

export interface AccountRow {
  id: string;
  name: string;
  createdAt: Date;
}

export interface AccountRepository {
  exists(id: string): Promise<boolean>;
  /** Up to `limit` accounts created after the `after` account (oldest first), whose name contains `name`. */
  list(q: { name?: string; limit: number; after?: string }): Promise<AccountRow[]>;
  /** The account's quota overrides; null when there is no such account. */
  quotas(id: string): Promise<QuotaOverrides | null>;
  /** Sets the given overrides (null: back to the default); null when there is no such account. */
  setQuotas(id: string, change: Partial<QuotaOverrides>): Promise<QuotaOverrides | null>;
}

export function accountRepository(prisma: PrismaClient): AccountRepository {
  const select = { id: true, name: true, createdAt: true } as const;
  return {
    async exists(id) {
      return (await prisma.account.count({ where: { id } })) > 0;
    },
    async quotas(id) {
      const row = await prisma.account.findUnique({ where: { id }, select: quotaColumns });
      return row && overridesOf(row);
    },
    async setQuotas(id, change) {
      const data = {
        ...(change.keys !== undefined ? { quotaKeys: change.keys } : {}),
        ...(change.endpoints !== undefined ? { quotaEndpoints: change.endpoints } : {}),
        ...(change.gpus !== undefined ? { quotaGpus: change.gpus } : {}),
        ...(change.chronos_runs !== undefined ? { quotaChronosRuns: change.chronos_runs } : {}),
      };
      const { count } = await prisma.account.updateMany({ where: { id }, data });
      if (count === 0) return null;
      return this.quotas(id);
    },
    list({ name, limit, after }) {
      return prisma.account.findMany({
        select,
        where: name ? { name: { contains: name, mode: 'insensitive' } } : {},
        orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
        take: limit,
        ...(after ? { cursor: { id: after }, skip: 1 } : {}),
      });
    },
  };
}

const quotaColumns = {
  quotaKeys: true,
  quotaEndpoints: true,
  quotaGpus: true,
  quotaChronosRuns: true,
} as const;
function overridesOf(row: {
  quotaKeys: number | null;
  quotaEndpoints: number | null;
  quotaGpus: number | null;
  quotaChronosRuns: number | null;
}): QuotaOverrides {
  return {
    keys: row.quotaKeys,
    endpoints: row.quotaEndpoints,
    gpus: row.quotaGpus,
    chronos_runs: row.quotaChronosRuns,
  };
}
