// Writes prisma/migrations/<timestamp>_<name>/migration.sql with the SQL that takes a database
// holding every existing migration to the state of schema.prisma — what `prisma migrate dev
// --create-only` does, without the native engine or a database server.
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { diffMigrationsToSchema } from './migrate.ts';
import { migrationsDir } from './paths.ts';

const name = process.argv[2];
if (!name || !/^[a-z0-9_]+$/.test(name)) {
  console.error('usage: npm run new-migration -w prisma -- <snake_case_name>');
  process.exit(2);
}
const sql = await diffMigrationsToSchema();
if (!sql) {
  console.error('schema.prisma and the migrations agree: nothing to write');
} else {
  const stamp = new Date().toISOString().replace(/\D/g, '').slice(0, 14);
  const dir = path.join(migrationsDir, `${stamp}_${name}`);
  await mkdir(dir, { recursive: true });
  await writeFile(path.join(dir, 'migration.sql'), sql + '\n');
  console.error(`wrote ${path.relative(process.cwd(), dir)}/migration.sql`);
}
