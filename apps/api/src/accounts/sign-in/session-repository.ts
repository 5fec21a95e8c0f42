// Data access for dashboard sessions and the identities that sign in to accounts.
import type { PrismaClient } from '@berth/db';

export interface SessionRow {
  accountId: string | null;
  data: unknown;
  expiresAt: Date;
}

export interface SessionRepository {
  /** The session, unless it is missing or expired. `id` is the hash of the cookie's session id. */
  get(id: string, now: Date): Promise<SessionRow | null>;
  set(id: string, row: SessionRow): Promise<void>;
  destroy(id: string): Promise<void>;
  /** Deletes expired sessions; returns how many. */
  purgeExpired(now: Date): Promise<number>;
}

export function sessionRepository(prisma: PrismaClient): SessionRepository {
  return {
    async get(id, now) {
      const row = await prisma.dashboardSession.findUnique({
        where: { id },
        select: { accountId: true, data: true, expiresAt: true },
      });
      return row && row.expiresAt > now ? row : null;
    },
    async set(id, row) {
      const data = row.data as object;
      await prisma.dashboardSession.upsert({
        where: { id },
        create: { id, accountId: row.accountId, data, expiresAt: row.expiresAt },
        update: { accountId: row.accountId, data, expiresAt: row.expiresAt },
      });
    },
    async destroy(id) {
      await prisma.dashboardSession.deleteMany({ where: { id } });
    },
    async purgeExpired(now) {
      const { count } = await prisma.dashboardSession.deleteMany({ where: { expiresAt: { lte: now } } });
      return count;
    },
  };
}
