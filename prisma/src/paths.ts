import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const packageDir = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
export const schemaPath = path.join(packageDir, 'schema.prisma');
export const migrationsDir = path.join(packageDir, 'migrations');
