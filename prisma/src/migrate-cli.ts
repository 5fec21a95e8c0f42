// `npm run db:migrate`: apply pending migrations to DATABASE_URL (or the embedded database).
import { openMigratedDatabase } from './client.ts';

const url = process.env.DATABASE_URL;
const db = await openMigratedDatabase(
  url ? { kind: 'postgres', url } : { kind: 'embedded', dataDir: process.env.BERTH_DATA_DIR ?? '.data/db' },
);
console.error(db.applied.length ? `applied: ${db.applied.join(', ')}` : 'database is up to date');
await db.close();
