// Applies prisma/migrations the way `prisma migrate deploy` does (same SQL, same
// `_prisma_migrations` bookkeeping), through the WebAssembly schema engine and a driver adapter.
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import type { SqlMigrationAwareDriverAdapterFactory } from '@prisma/driver-adapter-utils';
import type { MigrationList } from '@prisma/schema-engine-wasm';
import { PrismaPGlite } from 'pglite-prisma-adapter';
import { withSchemaEngine } from './schema-engine.ts';
import { migrationsDir, schemaPath } from './paths.ts';

const noFilters = { externalTables: [], externalEnums: [] };

export async function loadMigrations(dir = migrationsDir): Promise<MigrationList> {
  const entries = (await readdir(dir, { withFileTypes: true }))
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  const lockContent = await readFile(path.join(dir, 'migration_lock.toml'), 'utf8').catch(() => null);
  return {
    baseDir: dir,
    lockfile: { path: 'migration_lock.toml', content: lockContent },
    shadowDbInitScript: '',
    migrationDirectories: await Promise.all(
      entries.map(async (name) => ({
        // The bare directory name: with a longer path the engine records a different migration name.
        path: name,
        migrationFile: {
          path: 'migration.sql',
          content: {
            tag: 'ok' as const,
            value: await readFile(path.join(dir, name, 'migration.sql'), 'utf8'),
          },
        },
      })),
    ),
  };
}

export async function readSchema(file = schemaPath) {
  return { path: file, content: await readFile(file, 'utf8') };
}

/** Applies pending migrations; returns the names of those it applied (empty when up to date). */
export async function applyMigrations(adapter: SqlMigrationAwareDriverAdapterFactory): Promise<string[]> {
  const schema = await readSchema();
  const migrationsList = await loadMigrations();
  return withSchemaEngine(adapter, schema, async (engine) => {
    const out = await engine.applyMigrations({ migrationsList, filters: noFilters });
    return out.appliedMigrationNames;
  });
}

/**
 * The SQL that takes a database holding every migration to the state `schema.prisma` describes:
 * empty when they agree. The migrations are replayed on an in-memory PGlite shadow database, so
 * this needs no server. The drift test expects it to be empty; `new-migration` writes it out.
 */
export async function diffMigrationsToSchema(
  options: { schema?: { path: string; content: string }; migrations?: MigrationList } = {},
): Promise<string> {
  const schema = options.schema ?? (await readSchema());
  const migrationsList = options.migrations ?? (await loadMigrations());
  const pglite = new PGlite();
  try {
    const factory = new PrismaPGlite(pglite) as unknown as SqlMigrationAwareDriverAdapterFactory;
    return await withSchemaEngine(factory, schema, async (engine) => {
      const out = await engine.diff({
        from: { tag: 'migrations', ...migrationsList },
        to: { tag: 'schemaDatamodel', files: [schema] },
        script: true,
        exitCode: null,
        filters: noFilters,
      });
      return stripComments(out.stdout ?? '');
    });
  } finally {
    await pglite.close();
  }
}

function stripComments(sql: string): string {
  return sql
    .split('\n')
    .filter((l) => !l.trimStart().startsWith('--'))
    .join('\n')
    .trim();
}
