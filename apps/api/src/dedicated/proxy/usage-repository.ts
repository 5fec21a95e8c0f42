import { Prisma, type PrismaClient } from '@berth/db';

export interface UsageRow {
  accountId: string;
  endpointId: string;
  periodStart: Date;
  requests: number;
  promptTokens: number;
  completionTokens: number;
}

export interface UsageRepository {
  /** Adds the rows to the stored sums, in one statement. */
  add(rows: UsageRow[]): Promise<void>;
  forEndpoint(
    endpointId: string,
  ): Promise<{ requests: number; promptTokens: number; completionTokens: number }>;
}

export function usageRepository(prisma: PrismaClient): UsageRepository {
  return {
    async add(rows) {
      if (!rows.length) return;
      const values = rows.map(
        (r) =>
          Prisma.sql`(${r.accountId}, ${r.endpointId}, ${r.periodStart}::timestamp, ${r.requests}, ${r.promptTokens}::bigint, ${r.completionTokens}::bigint)`,
      );
      await prisma.$executeRaw`
        INSERT INTO endpoint_usage (account_id, endpoint_id, period_start, requests, prompt_tokens, completion_tokens)
        VALUES ${Prisma.join(values)}
        ON CONFLICT (account_id, endpoint_id, period_start) DO UPDATE SET
          requests = endpoint_usage.requests + excluded.requests,
          prompt_tokens = endpoint_usage.prompt_tokens + excluded.prompt_tokens,
          completion_tokens = endpoint_usage.completion_tokens + excluded.completion_tokens`;
    },
    async forEndpoint(endpointId) {
      const sums = await prisma.endpointUsage.aggregate({
        where: { endpointId },
        _sum: { requests: true, promptTokens: true, completionTokens: true },
      });
      return {
        requests: sums._sum.requests ?? 0,
        promptTokens: Number(sums._sum.promptTokens ?? 0),
        completionTokens: Number(sums._sum.completionTokens ?? 0),
      };
    },
  };
}
