// A PostgreSQL server of the suite's own (initdb in a temporary directory, its own port), for faults
// that stop the server itself: the machine's shared server is never stopped. Needs the PostgreSQL
// server binaries (/usr/lib/postgresql/<version>/bin or PG_BIN); run as root, the server runs as the
// `postgres` user.
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import pg from 'pg';

export interface PrivatePostgres {
  /** postgresql://postgres@127.0.0.1:<port>/berth */
  url: string;
  /** Stops the server: `immediate` is a crash (no shutdown checkpoint), `fast` a clean stop. */
  stop(mode?: 'immediate' | 'fast'): void;
  start(): void;
  /** Stops it and deletes its data. */
  destroy(): void;
}

function binDir(): string {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions)
    if (existsSync(path.join(root, v, 'bin', 'pg_ctl'))) return path.join(root, v, 'bin');
  throw new Error('no PostgreSQL server binaries: set PG_BIN to the directory holding initdb and pg_ctl');
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = binDir();
  const dir = mkdtempSync(path.join(tmpdir(), 'berth-private-pg-'));
  const data = path.join(dir, 'data');
  const port = await freePort();
  const asRoot = userInfo().uid === 0;
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
  }
  chmodSync(dir, 0o700);
  const run = (tool: string, args: string[]) =>
    execFileSync(
      asRoot ? 'runuser' : path.join(bin, tool),
      asRoot ? ['-u', 'postgres', '--', path.join(bin, tool), ...args] : args,
      {
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: 120_000,
      },
    );
  run('initdb', ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync']);
  const start = () =>
    run('pg_ctl', [
      '-D',
      data,
      '-w',
      '-l',
      path.join(dir, 'log'),
      '-o',
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`,
      'start',
    ]);
  start();
  const admin = new pg.Client({ connectionString: `postgresql://postgres@127.0.0.1:${port}/postgres` });
  await admin.connect();
  await admin.query('CREATE DATABASE berth');
  await admin.end();
  let running = true;
  const stop = (mode: 'immediate' | 'fast' = 'immediate') => {
    if (!running) return;
    run('pg_ctl', ['-D', data, '-w', '-m', mode, 'stop']);
    running = false;
  };
  return {
    url: `postgresql://postgres@127.0.0.1:${port}/berth`,
    stop,
    start() {
      if (running) return;
      start();
      running = true;
    },
    destroy() {
      try {
        stop('immediate');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
