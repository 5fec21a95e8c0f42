// `prisma generate` never starts the schema engine, but the CLI insists that one exists and
// otherwise tries to download it (which fails on machines without access to Prisma's host).
// Pointing it at any executable is enough; see shared/notes/prisma-offline.md.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const dir = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const env = {
  ...process.env,
  PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY ?? process.execPath,
  PRISMA_HIDE_UPDATE_MESSAGE: '1',
  CHECKPOINT_DISABLE: '1',
};
const r = spawnSync('npx', ['prisma', 'generate', '--schema', 'schema.prisma'], {
  cwd: dir,
  env,
  stdio: 'inherit',
});
process.exit(r.status ?? 1);
