// Secrets a laptop's quick start need not set: with the embedded database (no DATABASE_URL), the
// admin token and the secrets key are generated once into BERTH_DATA_DIR, beside the database.
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Config } from './config.ts';
import type { Logger } from './logger.ts';
import { newSecretsKey, parseSecretsKey, sealer, type Sealer } from './sealed.ts';

/**
 * BERTH_SECRETS_KEY, or — with the embedded database, which lives in the same directory — one
 * generated once into BERTH_DATA_DIR. With DATABASE_URL and no key, no secret can be stored.
 */
export async function secretsSealer(config: Config, logger: Logger): Promise<Sealer | undefined> {
  if (config.BERTH_SECRETS_KEY) return sealer(parseSecretsKey(config.BERTH_SECRETS_KEY)!);
  if (config.DATABASE_URL) {
    logger.warn(
      'BERTH_SECRETS_KEY is not set: managed tools with headers (credentials) cannot be registered',
    );
    return undefined;
  }
  const file = path.join(config.BERTH_DATA_DIR, 'secrets-key');
  const existing = (await readFile(file, 'utf8').catch(() => ''))?.trim();
  const key = existing ? parseSecretsKey(existing) : undefined;
  if (key) return sealer(key);
  if (existing)
    throw new Error(
      `${file} does not hold a secrets key (64 hex digits); restore it or set BERTH_SECRETS_KEY`,
    );
  const fresh = newSecretsKey();
  await mkdir(config.BERTH_DATA_DIR, { recursive: true });
  await writeFile(file, fresh + '\n', { mode: 0o600 });
  logger.info({ file }, 'generated a secrets key (set BERTH_SECRETS_KEY to choose one)');
  return sealer(parseSecretsKey(fresh)!);
}

/**
 * Without DATABASE_URL (a laptop, the quick start) the admin token may be left unset: one is
 * generated once into the data directory, so the quick start can read it from there.
 */
export async function embeddedAdminToken(dataDir: string, logger: Logger): Promise<string> {
  const file = path.join(dataDir, 'admin-token');
  const existing = await readFile(file, 'utf8').catch(() => undefined);
  if (existing?.trim()) return existing.trim();
  const token = randomBytes(24).toString('hex');
  await mkdir(dataDir, { recursive: true });
  await writeFile(file, token + '\n', { mode: 0o600 });
  logger.info({ file }, 'generated an admin token (set ADMIN_TOKEN to choose one)');
  return token;
}
