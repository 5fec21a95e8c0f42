// An account's Olympus policy (Prisma only here).
import type { PrismaClient } from '@berth/db';
import type { Objective } from '../olympus/pick.ts';

export interface OlympusRoute {
  name: string;
  model: string;
  examples: string[];
}

export interface OlympusPolicyRecord {
  allowedModels: string[];
  objective: Objective;
  routes: OlympusRoute[];
  updatedAt: Date | null;
}

export const DEFAULT_POLICY: OlympusPolicyRecord = {
  allowedModels: [],
  objective: 'cost',
  routes: [],
  updatedAt: null,
};

export interface OlympusRepository {
  get(accountId: string): Promise<OlympusPolicyRecord>;
  put(accountId: string, policy: Omit<OlympusPolicyRecord, 'updatedAt'>): Promise<OlympusPolicyRecord>;
}

export function olympusRepository(prisma: PrismaClient): OlympusRepository {
  const view = (row: { allowedModels: string[]; objective: string; routes: unknown; updatedAt: Date }) => ({
    allowedModels: row.allowedModels,
    objective: row.objective as Objective,
    routes: row.routes as OlympusRoute[],
    updatedAt: row.updatedAt,
  });
  return {
    async get(accountId) {
      const row = await prisma.olympusPolicy.findUnique({ where: { accountId } });
      return row ? view(row) : DEFAULT_POLICY;
    },
    async put(accountId, policy) {
      const data = { ...policy, routes: policy.routes as unknown as object[], updatedAt: new Date() };
      const row = await prisma.olympusPolicy.upsert({
        where: { accountId },
        create: { accountId, ...data },
        update: data,
      });
      return view(row);
    },
  };
}
