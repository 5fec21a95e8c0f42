export { openDatabase, openMigratedDatabase } from './client.ts';
export type { Database, DbOptions } from './client.ts';
export { applyMigrations, diffMigrationsToSchema, loadMigrations, readSchema } from './migrate.ts';
export { Prisma, PrismaClient } from './generated/client.ts';
export type { Account, ApiKey } from './generated/client.ts';
export { KeyScope } from './generated/enums.ts';
