// Per-endpoint log files in BERTH_DATA_DIR/logs: the engine processes' stdout and stderr, the
// supervisor's own lines (started, exited, restarting) and the reconciler's events, in the order
// they happened. Bounded: past maxBytes the file is moved to `<id>.log.1` (one older file is kept).
import { appendFileSync, existsSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';

export interface LogFiles {
  /** Appends raw output (a child's stdout/stderr chunk). */
  write(id: string, chunk: Buffer | string): void;
  /** Appends one supervisor line, timestamped and marked with `#`. */
  note(id: string, text: string): void;
  path(id: string): string;
  /** The retained log (older file first). */
  read(id: string): Promise<string>;
  remove(id: string): void;
}

export function logFiles(dir: string, maxBytes: number): LogFiles {
  mkdirSync(dir, { recursive: true });
  const sizes = new Map<string, number>();
  const file = (id: string) => path.join(dir, `${id}.log`);

  const write = (id: string, chunk: Buffer | string) => {
    const f = file(id);
    try {
      let size = sizes.get(id) ?? (existsSync(f) ? statSync(f).size : 0);
      if (size >= maxBytes) {
        renameSync(f, `${f}.1`);
        size = 0;
      }
      mkdirSync(dir, { recursive: true });
      appendFileSync(f, chunk);
      sizes.set(id, size + Buffer.byteLength(chunk));
    } catch {
      // A log that cannot be written (disk full, directory removed) must not stop the engine.
      sizes.delete(id);
    }
  };

  return {
    write,
    note: (id, text) => write(id, `# ${new Date().toISOString()} ${text}\n`),
    path: file,
    async read(id) {
      const older = await readFile(`${file(id)}.1`, 'utf8').catch(() => '');
      const current = await readFile(file(id), 'utf8').catch(() => '');
      return older + current;
    },
    remove(id) {
      sizes.delete(id);
      rmSync(file(id), { force: true });
      rmSync(`${file(id)}.1`, { force: true });
    },
  };
}
