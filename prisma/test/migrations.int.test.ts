import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { PrismaPg } from '@prisma/adapter-pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  applyMigrations,
  diffMigrationsToSchema,
  loadMigrations,
  openMigratedDatabase,
  readSchema,
} from '../src/index.ts';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';

describe('migrations on real PostgreSQL', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase('migrations');
  });
  afterAll(async () => db?.drop());

  it('applies every migration once and records them as prisma migrate deploy does', async () => {
    const adapter = new PrismaPg({ connectionString: db.url });
    const all = (await loadMigrations()).migrationDirectories.map((m) => m.path);
    expect(all.length).toBeGreaterThan(0);
    expect(await applyMigrations(adapter)).toEqual(all);
    expect(await applyMigrations(adapter)).toEqual([]);

    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    const rows = await c.query(
      'SELECT migration_name, finished_at IS NOT NULL AS done, rolled_back_at FROM _prisma_migrations ORDER BY migration_name',
    );
    await c.end();
    expect(rows.rows).toEqual(
      all.map((name) => ({ migration_name: name, done: true, rolled_back_at: null })),
    );
  });
});

describe('schema drift', () => {
  it('schema.prisma and the migrations do not drift apart', async () => {
    expect(await diffMigrationsToSchema()).toBe('');
  });

  it('the drift check notices a schema change that has no migration', async () => {
    const schema = await readSchema();
    const changed = schema.content.replace(
      '  @@index([accountId])',
      '  note String?\n  @@index([accountId])',
    );
    expect(changed).not.toBe(schema.content);
    expect(await diffMigrationsToSchema({ schema: { ...schema, content: changed } })).toMatch(
      /ALTER TABLE "api_keys" ADD COLUMN\s+"note" TEXT/,
    );
  });
});

describe('migrations on the embedded database (PGlite)', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'berth-pglite-'));
  });
  afterAll(async () => rm(dir, { recursive: true, force: true }));

  it('applies the same migrations and the client works on them, across a restart', async () => {
    const first = await openMigratedDatabase({ kind: 'embedded', dataDir: dir });
    expect(first.applied).toEqual((await loadMigrations()).migrationDirectories.map((m) => m.path));
    await first.prisma.account.create({ data: { id: 'acct_embedded', name: 'embedded' } });
    await first.close();

    const second = await openMigratedDatabase({ kind: 'embedded', dataDir: dir });
    expect(second.applied).toEqual([]);
    expect(await second.prisma.account.findUnique({ where: { id: 'acct_embedded' } })).toMatchObject({
      name: 'embedded',
    });
    await second.close();
  });
});
