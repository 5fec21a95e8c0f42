// Engines must not outlive the process that runs them. Each running replica's pid is kept in a file
// under runDir; an API that was killed leaves its files behind, and the next start stops the engines
// they name (only if the pid is still an engine: pids are reused).
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';

export interface PidFiles {
  write(id: string, replica: number, pid: number): void;
  remove(id: string, replica: number): void;
  /**
   * Resolves once the engines a previous run left behind are gone: SIGTERM, up to `graceMs` to exit,
   * then SIGKILL (an old vLLM still holding GPU memory would make a new one fail with CUDA OOM).
   * No engine may start before it.
   */
  readonly reaped: Promise<void>;
}

/** Stops the engines a previous run left behind, then keeps this run's pid files. */
export function pidFiles(runDir: string, log: Logger, graceMs: number): PidFiles {
  mkdirSync(runDir, { recursive: true });
  const leftovers: number[] = [];
  for (const f of readdirSync(runDir)) {
    if (!f.endsWith('.pid')) continue;
    const pid = Number(readFileSync(path.join(runDir, f), 'utf8'));
    rmSync(path.join(runDir, f), { force: true });
    if (!Number.isInteger(pid) || pid <= 1 || !isEngine(pid)) continue;
    if (signal(pid, 'SIGTERM')) leftovers.push(pid);
  }
  const file = (id: string, replica: number) => path.join(runDir, `${id}-${replica}.pid`);
  return {
    write: (id, replica, pid) => writeFileSync(file(id, replica), String(pid)),
    remove: (id, replica) => rmSync(file(id, replica), { force: true }),
    reaped: Promise.all(leftovers.map((pid) => reap(pid, graceMs, log))).then(() => {}),
  };
}

/** Signals an engine's process group; false when it is gone. */
function signal(pid: number, sig: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pid, sig);
    return true;
  } catch {
    return false;
  }
}

async function reap(pid: number, graceMs: number, log: Logger): Promise<void> {
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    if (!signal(pid, 0)) {
      log.warn({ pid }, 'stopped an engine process left by a previous run');
      return;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  signal(pid, 'SIGKILL');
  while (signal(pid, 0) && Date.now() < deadline + 5_000) await new Promise((r) => setTimeout(r, 50));
  log.warn({ pid, graceMs }, 'killed an engine process left by a previous run (it outlived the stop grace)');
}

function isEngine(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('--served-model-name');
  } catch {
    return false;
  }
}
