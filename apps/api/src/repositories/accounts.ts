// Accounts as the admin lists them: paged in creation order, searched by name.
import type { PrismaClient } from '@berth/db';

export interface AccountRow {
  id: string;
  name: string;
  createdAt: Date;
}

export interface AccountRepository {
  exists(id: string): Promise<boolean>;
  /** Up to `limit` accounts created after the `after` account (oldest first), whose name contains `name`. */
  list(q: { name?: string; limit: number; after?: string }): Promise<AccountRow[]>;
}

export function accountRepository(prisma: PrismaClient): AccountRepository {
  const select = { id: true, name: true, createdAt: true } as const;
  return {
    async exists(id) {
      return (await prisma.account.count({ where: { id } })) > 0;
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
