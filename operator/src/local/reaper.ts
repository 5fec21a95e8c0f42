// Engines must not outlive the process that runs them. Each running replica's pid is kept in a file
// under runDir; an API that was killed leaves its files behind, and the next start stops the engines
// they name (only if the pid is still an engine: pids are reused).
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';

export interface PidFiles {
  write(id: string, replica: number, pid: number): void;
  remove(id: string, replica: number): void;
}

/** Stops the engines a previous run left behind, then keeps this run's pid files. */
export function pidFiles(runDir: string, log: Logger): PidFiles {
  mkdirSync(runDir, { recursive: true });
  for (const f of readdirSync(runDir)) {
    if (!f.endsWith('.pid')) continue;
    const pid = Number(readFileSync(path.join(runDir, f), 'utf8'));
    rmSync(path.join(runDir, f), { force: true });
    if (!Number.isInteger(pid) || pid <= 1 || !isEngine(pid)) continue;
    try {
      process.kill(-pid, 'SIGTERM');
      log.warn({ pid }, 'stopped an engine process left by a previous run');
    } catch {
      // already gone
    }
  }
  const file = (id: string, replica: number) => path.join(runDir, `${id}-${replica}.pid`);
  return {
    write: (id, replica, pid) => writeFileSync(file(id, replica), String(pid)),
    remove: (id, replica) => rmSync(file(id, replica), { force: true }),
  };
}

function isEngine(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('--served-model-name');
  } catch {
    return false;
  }
}
