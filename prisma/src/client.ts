// One way to open the database for every part of Berth: a real Postgres when a URL is given,
// otherwise an embedded Postgres (PGlite) in a data directory, so `npm start` works on a laptop
// with nothing installed. Both go through Prisma's driver adapters: no native engine at run time.
import { mkdir } from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';
import { PrismaPg } from '@prisma/adapter-pg';
import type { SqlMigrationAwareDriverAdapterFactory } from '@prisma/driver-adapter-utils';
import { PrismaPGlite } from 'pglite-prisma-adapter';
import { PrismaClient } from './generated/client.ts';
import { applyMigrations } from './migrate.ts';

export type DbOptions =
  { kind: 'postgres'; url: string; poolSize?: number } | { kind: 'embedded'; dataDir: string };

export interface Database {
  readonly kind: DbOptions['kind'];
  readonly prisma: PrismaClient;
  /** The adapter factory, for the migration engine. */
  readonly adapter: SqlMigrationAwareDriverAdapterFactory;
  /** The embedded instance, when there is one (LISTEN/NOTIFY and raw SQL go through it). */
  readonly pglite?: PGlite;
  close(): Promise<void>;
}

export async function openDatabase(options: DbOptions): Promise<Database> {
  if (options.kind === 'postgres') {
    // A bounded connect: with the server gone (a host down, a dropped route), queries fail within
    // seconds (the API answers 503) instead of waiting on TCP's own timeout.
    const adapter = new PrismaPg({
      connectionString: options.url,
      max: options.poolSize ?? 10,
      connectionTimeoutMillis: 5_000,
    });
    const prisma = new PrismaClient({ adapter });
    return { kind: 'postgres', prisma, adapter, close: () => prisma.$disconnect() };
  }
  await mkdir(options.dataDir, { recursive: true });
  const pglite = await PGlite.create(options.dataDir);
  const adapter = new PrismaPGlite(pglite) as unknown as SqlMigrationAwareDriverAdapterFactory;
  const prisma = new PrismaClient({ adapter: adapter as never });
  return {
    kind: 'embedded',
    prisma,
    adapter,
    pglite,
    close: async () => {
      await prisma.$disconnect();
      await pglite.close();
    },
  };
}

/** Opens the database and brings its schema up to date. */
export async function openMigratedDatabase(options: DbOptions): Promise<Database & { applied: string[] }> {
  const db = await openDatabase(options);
  try {
    // First a plain query: a server that is down or a database that does not exist fails here with
    // the driver adapter's classified error (the schema engine's own carries only a message).
    await db.prisma.$queryRaw`SELECT 1`;
    const applied = await applyMigrations(db.adapter);
    return Object.assign(db, { applied });
  } catch (err) {
    await db.close();
    throw err;
  }
}
