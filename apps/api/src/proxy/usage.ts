// Token usage of every proxied call, summed in memory per (account, endpoint, minute) and written in
// one statement per flush: the response path never waits on the database.
import type { Logger } from 'pino';
import type { UsageRepository, UsageRow } from '../repositories/usage.ts';

export interface UsageRecorder {
  record(u: { accountId: string; endpointId: string; promptTokens: number; completionTokens: number }): void;
  flush(): Promise<void>;
  close(): Promise<void>;
}

export function usageRecorder(repo: UsageRepository, logger: Logger, intervalMs: number): UsageRecorder {
  let pending = new Map<string, UsageRow>();
  const flush = async () => {
    if (!pending.size) return;
    const batch = pending;
    pending = new Map();
    try {
      await repo.add([...batch.values()]);
    } catch (err) {
      // Put it back: usage is billing data, it must not be dropped on a transient failure.
      for (const [k, row] of batch) {
        const cur = pending.get(k);
        if (cur) {
          cur.requests += row.requests;
          cur.promptTokens += row.promptTokens;
          cur.completionTokens += row.completionTokens;
        } else pending.set(k, row);
      }
      logger.warn({ err: (err as Error).message, rows: batch.size }, 'usage flush failed; will retry');
    }
  };
  const timer = setInterval(() => void flush(), intervalMs);
  timer.unref();
  return {
    record(u) {
      const minute = Math.floor(Date.now() / 60_000) * 60_000;
      const key = `${u.accountId}\u0000${u.endpointId}\u0000${minute}`;
      const row = pending.get(key);
      if (row) {
        row.requests++;
        row.promptTokens += u.promptTokens;
        row.completionTokens += u.completionTokens;
      } else {
        pending.set(key, {
          accountId: u.accountId,
          endpointId: u.endpointId,
          periodStart: new Date(minute),
          requests: 1,
          promptTokens: u.promptTokens,
          completionTokens: u.completionTokens,
        });
      }
    },
    flush,
    async close() {
      clearInterval(timer);
      await flush();
    },
  };
}
