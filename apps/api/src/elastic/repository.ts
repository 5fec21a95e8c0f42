// The elastic_models table. Prisma stays here; the catalog service holds the rows in memory.
import type { PrismaClient } from '@berth/db';
import type { ModelKind, StoredBackend } from './entry.ts';

export interface ModelRow {
  name: string;
  kind: ModelKind;
  inputPerMTok: bigint;
  outputPerMTok: bigint;
  contextLength: number | null;
  fallbacks: string[];
  backends: StoredBackend[];
  updatedAt: Date;
}

export interface CatalogRepository {
  all(): Promise<ModelRow[]>;
  /** Creates or replaces; true when it was created. */
  put(row: Omit<ModelRow, 'updatedAt'>): Promise<boolean>;
  delete(name: string): Promise<boolean>;
}

export function catalogRepository(prisma: PrismaClient): CatalogRepository {
  return {
    async all() {
      const rows = await prisma.elasticModel.findMany({ orderBy: { name: 'asc' } });
      return rows.map((r) => ({
        ...r,
        kind: r.kind as ModelKind,
        backends: r.backends as unknown as StoredBackend[],
      }));
    },
    async put(row) {
      const data = { ...row, backends: row.backends as object[] };
      const existed = await prisma.elasticModel.findUnique({
        where: { name: row.name },
        select: { name: true },
      });
      await prisma.elasticModel.upsert({ where: { name: row.name }, create: data, update: data });
      return !existed;
    },
    async delete(name) {
      const { count } = await prisma.elasticModel.deleteMany({ where: { name } });
      return count > 0;
    },
  };
}
