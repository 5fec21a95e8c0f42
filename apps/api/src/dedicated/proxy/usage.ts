// Token usage of every proxied call, summed in memory per (account, endpoint, minute) and written in
// one statement per flush: the response path never waits on the database.
//
// A failed flush keeps its rows for the next one. At shutdown the last flush is retried for a few
// seconds; if the database is still gone, the rows are spooled to a file in the data dir (imported
// at the next start) and logged in full, so usage is never dropped silently.
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { UsageRepository, UsageRow } from './usage-repository.ts';

export interface UsageRecorderOptions {
  /** Where rows that could not be written at shutdown are saved (and read back at start-up). */
  spoolDir?: string;
  /** How long the shutdown flush retries before spooling (default 5 s). */
  closeRetryMs?: number;
}

export interface UsageRecorder {
  record(u: { accountId: string; endpointId: string; promptTokens: number; completionTokens: number }): void;
  flush(): Promise<void>;
  close(): Promise<void>;
}

export function usageRecorder(
  repo: UsageRepository,
  logger: Logger,
  intervalMs: number,
  options: UsageRecorderOptions = {},
): UsageRecorder {
  let pending = new Map<string, UsageRow>();
  // The current minute's rows of `pending` by account and endpoint: a call finds its row with two
  // lookups of strings it already holds (their hashes cached), without building the batch key.
  // Dropped when the minute or the batch changes.
  let rows = new Map<string, Map<string, UsageRow>>();
  let rowsMinute = 0;
  const flush = async () => {
    if (!pending.size) return;
    const batch = pending;
    pending = new Map();
    rows = new Map();
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
      if (minute !== rowsMinute) {
        rows = new Map();
        rowsMinute = minute;
      }
      let byEndpoint = rows.get(u.accountId);
      let row = byEndpoint?.get(u.endpointId);
      if (!row) {
        const key = `${u.accountId}\u0000${u.endpointId}\u0000${minute}`;
        row = pending.get(key);
        if (!row) {
          row = {
            accountId: u.accountId,
            endpointId: u.endpointId,
            periodStart: new Date(minute),
            requests: 0,
            promptTokens: 0,
            completionTokens: 0,
          };
          pending.set(key, row);
        }
        if (!byEndpoint) rows.set(u.accountId, (byEndpoint = new Map()));
        byEndpoint.set(u.endpointId, row);
      }
      row.requests++;
      row.promptTokens += u.promptTokens;
      row.completionTokens += u.completionTokens;
    },
    flush,
    async close() {
      clearInterval(timer);
      await flush();
      const deadline = Date.now() + (options.closeRetryMs ?? 5_000);
      for (let wait = 250; pending.size && Date.now() < deadline; wait = Math.min(wait * 2, 2_000)) {
        await new Promise((r) => setTimeout(r, Math.max(0, Math.min(wait, deadline - Date.now()))));
        await flush();
      }
      if (pending.size) await spool([...pending.values()], options.spoolDir, logger);
    },
  };
}

const SPOOL_FILE = /^usage-[\w-]+\.json$/;

async function spool(rows: UsageRow[], dir: string | undefined, logger: Logger): Promise<void> {
  let file: string | undefined;
  if (dir) {
    file = path.join(dir, `usage-${Date.now()}-${randomBytes(4).toString('hex')}.json`);
    try {
      await mkdir(dir, { recursive: true });
      await writeFile(file, JSON.stringify(rows));
    } catch (err) {
      logger.error({ err: (err as Error).message, file }, 'could not spool usage rows');
      file = undefined;
    }
  }
  // Logged in full either way: with no writable data dir the log is the only copy.
  logger.error(
    { rows, file },
    file
      ? 'database unavailable at shutdown: usage rows spooled, written at the next start'
      : 'database unavailable at shutdown: usage rows NOT written (they are in this log line)',
  );
}

/** Writes rows spooled at an earlier shutdown, deleting each file once its rows are stored. */
export async function importSpooledUsage(
  repo: UsageRepository,
  dir: string,
  logger: Logger,
): Promise<number> {
  const files = (await readdir(dir).catch(() => [] as string[])).filter((f) => SPOOL_FILE.test(f)).sort();
  let imported = 0;
  for (const name of files) {
    const file = path.join(dir, name);
    try {
      const rows = (JSON.parse(await readFile(file, 'utf8')) as (UsageRow & { periodStart: string })[]).map(
        (r) => ({ ...r, periodStart: new Date(r.periodStart) }),
      );
      await repo.add(rows);
      await unlink(file);
      imported += rows.length;
    } catch (err) {
      logger.warn(
        { err: (err as Error).message, file },
        'could not import spooled usage rows; will retry at the next start',
      );
    }
  }
  if (imported) logger.info({ rows: imported, files: files.length }, 'imported spooled usage rows');
  return imported;
}
