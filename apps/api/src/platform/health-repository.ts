// Whether the database answers and holds this build's schema (GET /readyz).
import type { PrismaClient } from '@berth/db';

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
