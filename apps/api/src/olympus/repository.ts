// An account's Olympus policy (Prisma only here).
import type { PrismaClient } from '@berth/db';
import type { Objective } from './ranking.ts';

export interface OlympusRoute {
  name: string;
  model: string;
  examples: string[];
}

export interface OlympusPolicyRecord {
  allowedModels: string[];
  objective: Objective;
  routes: OlympusRoute[];
  /** Cosine similarity a prompt needs to a route's example to take that route. */
  routeThreshold: number;
  /** The catalog embedding model routes are matched with; null: the cheapest in the catalog. */
  embeddingModel: string | null;
  updatedAt: Date | null;
}

/** The documented default of `route_threshold`. */
export const DEFAULT_ROUTE_THRESHOLD = 0.5;

export const DEFAULT_POLICY: OlympusPolicyRecord = {
  allowedModels: [],
  objective: 'cost',
  routes: [],
  routeThreshold: DEFAULT_ROUTE_THRESHOLD,
  embeddingModel: null,
  updatedAt: null,
};

export interface OlympusRepository {
  get(accountId: string): Promise<OlympusPolicyRecord>;
  put(accountId: string, policy: Omit<OlympusPolicyRecord, 'updatedAt'>): Promise<OlympusPolicyRecord>;
}

export function olympusRepository(prisma: PrismaClient): OlympusRepository {
  const view = (row: {
    allowedModels: string[];
    objective: string;
    routes: unknown;
    routeThreshold: number;
    embeddingModel: string | null;
    updatedAt: Date;
  }): OlympusPolicyRecord => ({
    allowedModels: row.allowedModels,
    objective: row.objective as Objective,
    routes: row.routes as OlympusRoute[],
    routeThreshold: row.routeThreshold,
    embeddingModel: row.embeddingModel,
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
