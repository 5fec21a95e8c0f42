// Starts the real API (in this process or as a child process) on a fresh PostgreSQL database.
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseConfig, startApi, type RunningApi } from '@berth/api';
import { pino } from 'pino';
import { createTestDatabase, type TestDatabase } from './postgres.ts';

export const ADMIN_TOKEN = 'test-admin-token-0123456789';
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface TestApi extends RunningApi {
  db: TestDatabase;
  admin(pathname: string, init?: RequestInit): Promise<Response>;
  /** An account and its default inference key, plus keys of the other scopes. */
  newAccount(): Promise<{ id: string; inference: string; compute: string; global: string }>;
  stop(): Promise<void>;
}

export async function startTestApi(
  env: Record<string, string> = {},
  db?: TestDatabase,
  options: { now?: () => Date } = {},
): Promise<TestApi> {
  const database = db ?? (await createTestDatabase('api'));
  const config = parseConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    DATABASE_URL: database.url,
    ADMIN_TOKEN,
    LOG_LEVEL: 'silent',
    SHUTDOWN_GRACE_MS: '2000',
    ...env,
  });
  const api = await startApi(config, { logger: pino({ level: env.LOG_LEVEL ?? 'silent' }), ...options });
  const admin = (pathname: string, init: RequestInit = {}) =>
    fetch(api.url + pathname, {
      ...init,
      headers: {
        authorization: `Bearer ${ADMIN_TOKEN}`,
        'content-type': 'application/json',
        ...init.headers,
      },
    });
  return {
    ...api,
    db: database,
    admin,
    async newAccount() {
      const res = await admin('/admin/accounts', { method: 'POST', body: JSON.stringify({ name: 'test' }) });
      if (res.status !== 201) throw new Error(`account creation: ${res.status} ${await res.text()}`);
      const { account, key } = (await res.json()) as { account: { id: string }; key: { value: string } };
      const make = async (scope: string) => {
        const r = await admin(`/admin/accounts/${account.id}/keys`, {
          method: 'POST',
          body: JSON.stringify({ name: scope, scope }),
        });
        return ((await r.json()) as { value: string }).value;
      };
      return {
        id: account.id,
        inference: key.value,
        compute: await make('compute'),
        global: await make('global'),
      };
    },
    async stop() {
      await api.close();
      if (!db) await database.drop();
    },
  };
}

export interface ApiProcess {
  url: string;
  child: ChildProcess;
  output(): string;
  stop(): Promise<number | null>;
}

/**
 * Collects an API process's stdout and stderr and waits for its "Berth API listening" log line:
 * its port, and everything it printed so far (and later).
 */
export async function listeningPort(child: ChildProcess): Promise<{ port: number; output: () => string }> {
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`API did not start in 60 s:\n${out}`)), 60_000);
    child.stdout!.on('data', () => {
      const m = /"port":(\d+)[^\n]*Berth API listening/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`API exited with ${code}:\n${out}`));
    });
  });
  return { port, output: () => out };
}

/** `npm start`'s entry point as a separate process (for multi-replica tests). */
export async function spawnApi(env: Record<string, string>): Promise<ApiProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'apps/api/src/main.ts'], {
    cwd: root,
    // The suite's KUBECONFIG is for the tests; an API process gets a cluster only when asked.
    env: { ...process.env, KUBECONFIG: '', HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const { port, output } = await listeningPort(child);
  return {
    url: `http://127.0.0.1:${port}`,
    child,
    output,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve(child.exitCode);
        child.once('exit', (code) => resolve(code));
        child.kill('SIGTERM');
      }),
  };
}

export function bearer(key: string): Record<string, string> {
  return { authorization: `Bearer ${key}` };
}
