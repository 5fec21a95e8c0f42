// Data access for the tool catalog and per-account enablement (Prisma only here).
import { Prisma, type PrismaClient } from '@berth/db';

export type ToolKind = 'mcp' | 'feature';

export interface ToolRecord {
  id: string;
  kind: ToolKind;
  description: string;
  url: string | null;
  headersSealed: string | null;
  headerNames: string[];
  /** Micro-units per call. */
  pricePerCall: bigint;
  timeoutMs: number;
  createdAt: Date;
  updatedAt: Date;
}

export interface ToolWrite {
  description: string;
  url: string;
  headersSealed: string | null;
  headerNames: string[];
  pricePerCall: bigint;
  timeoutMs: number;
}

export interface ToolRepository {
  list(): Promise<ToolRecord[]>;
  get(id: string): Promise<ToolRecord | null>;
  /** Creates or replaces an MCP tool; `created` says which. Never touches a feature's row. */
  upsertMcp(id: string, tool: ToolWrite): Promise<{ tool: ToolRecord; created: boolean } | { feature: true }>;
  /** Deletes an MCP tool and its enablements; null when there is none. */
  deleteMcp(id: string): Promise<ToolRecord | null>;
  /** The ids of the tools enabled for the account, with when. */
  enabled(accountId: string): Promise<Map<string, Date>>;
  /** Which of `ids` exist, and which of them the account has enabled — one query. */
  lookup(
    accountId: string,
    ids: readonly string[],
  ): Promise<Map<string, { tool: ToolRecord; enabled: boolean }>>;
  /** Idempotent: the first enablement time is kept. False when the tool does not exist. */
  enable(accountId: string, toolId: string): Promise<Date | null>;
  /** True when it was enabled. */
  disable(accountId: string, toolId: string): Promise<boolean>;
}

export function toolRepository(prisma: PrismaClient): ToolRepository {
  return {
    list: () => prisma.tool.findMany({ orderBy: { id: 'asc' } }),
    get: (id) => prisma.tool.findUnique({ where: { id } }),
    async upsertMcp(id, tool) {
      return prisma.$transaction(async (tx) => {
        // Row lock: concurrent PUTs of one id serialize; the last one wins whole.
        const rows = await tx.$queryRaw<
          { kind: ToolKind }[]
        >`SELECT kind FROM tools WHERE id = ${id} FOR UPDATE`;
        const existing = rows[0];
        if (existing?.kind === 'feature') return { feature: true as const };
        if (existing) {
          const updated = await tx.tool.update({ where: { id }, data: { ...tool, updatedAt: new Date() } });
          return { tool: updated, created: false };
        }
        try {
          const created = await tx.tool.create({ data: { id, kind: 'mcp', ...tool } });
          return { tool: created, created: true };
        } catch (err) {
          if (err instanceof Prisma.PrismaClientKnownRequestError && err.code === 'P2002') {
            // Created by a concurrent PUT after our SELECT: replace it, as a PUT does.
            const updated = await tx.tool.update({ where: { id }, data: { ...tool, updatedAt: new Date() } });
            return { tool: updated, created: false };
          }
          throw err;
        }
      });
    },
    async deleteMcp(id) {
      const rows = await prisma.tool.findMany({ where: { id, kind: 'mcp' } });
      if (!rows[0]) return null;
      const { count } = await prisma.tool.deleteMany({ where: { id, kind: 'mcp' } });
      return count ? rows[0] : null;
    },
    async enabled(accountId) {
      const rows = await prisma.toolEnablement.findMany({ where: { accountId } });
      return new Map(rows.map((r) => [r.toolId, r.enabledAt]));
    },
    async lookup(accountId, ids) {
      const tools = await prisma.tool.findMany({
        where: { id: { in: [...ids] } },
        include: { enablements: { where: { accountId }, select: { accountId: true } } },
      });
      return new Map(
        tools.map(({ enablements, ...tool }) => [tool.id, { tool, enabled: enablements.length > 0 }]),
      );
    },
    async enable(accountId, toolId) {
      const rows = await prisma.$queryRaw<{ enabled_at: Date }[]>`
        WITH ins AS (
          INSERT INTO tool_enablements (account_id, tool_id)
          SELECT ${accountId}, id FROM tools WHERE id = ${toolId}
          ON CONFLICT (account_id, tool_id) DO NOTHING
          RETURNING enabled_at)
        SELECT enabled_at FROM ins
        UNION ALL
        SELECT enabled_at FROM tool_enablements WHERE account_id = ${accountId} AND tool_id = ${toolId}`;
      return rows[0]?.enabled_at ?? null;
    },
    async disable(accountId, toolId) {
      const { count } = await prisma.toolEnablement.deleteMany({ where: { accountId, toolId } });
      return count > 0;
    },
  };
}
