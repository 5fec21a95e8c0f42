// One API process per data directory. Two on the same BERTH_DATA_DIR would share the embedded
// database and stop each other's engine processes (each reaps the pid files it finds at start), so
// the first takes an exclusive lock: a file holding its pid, created atomically (a complete file is
// hard-linked into place, so no reader sees it half-written). A lock whose pid is no longer running
// (a killed API) is taken over.
import { randomBytes } from 'node:crypto';
import { link, mkdir, readFile, rename, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { ConfigError } from './config.ts';

export const LOCK_FILE = 'berth.lock';

export interface DataDirLock {
  readonly file: string;
  /** The pid of a dead process whose lock was taken over, if any. */
  readonly stalePid?: number;
  /** Removes the lock (if it is still ours). */
  release(): Promise<void>;
}

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'; // alive, owned by another user
  }
}

const pidIn = (text: string | undefined): number | undefined => {
  const pid = Number(text?.trim());
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
};

export async function lockDataDir(dir: string): Promise<DataDirLock> {
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, LOCK_FILE);
  const mine = `${process.pid}\n`;
  let stalePid: number | undefined;
  for (let attempt = 0; attempt < 20; attempt++) {
    const temp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
    await writeFile(temp, mine);
    try {
      await link(temp, file);
      return {
        file,
        ...(stalePid ? { stalePid } : {}),
        async release() {
          const current = await readFile(file, 'utf8').catch(() => undefined);
          if (current === mine) await unlink(file).catch(() => {});
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    } finally {
      await unlink(temp).catch(() => {});
    }
    const held = await readFile(file, 'utf8').catch(() => undefined);
    if (held === undefined) continue; // released meanwhile: try again
    const pid = pidIn(held);
    if (pid && running(pid)) {
      throw new ConfigError(
        `BERTH_DATA_DIR ${dir} is in use by another Berth API (pid ${pid}, lock ${file}): stop that process, or set BERTH_DATA_DIR to another directory`,
      );
    }
    // Stale. Move it aside atomically (only one of several starting processes can), and put it back
    // if what was moved is not what was judged stale (another process took it over in between).
    const aside = `${file}.stale.${process.pid}`;
    try {
      await rename(file, aside);
    } catch {
      continue;
    }
    const moved = await readFile(aside, 'utf8').catch(() => undefined);
    if (moved !== held) await link(aside, file).catch(() => {});
    else stalePid = pid;
    await unlink(aside).catch(() => {});
  }
  throw new ConfigError(`Could not take the lock ${file}: too much contention; try again`);
}
