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
  /**
   * A catalog chat model served by one engine (`engineUrl` without `/v1`, the model it serves),
   * priced per million tokens (default 1.00 in and out); throws unless it was created.
   */
  chatModel(
    name: string,
    engine: { engineUrl: string; model: string },
    pricing?: { inputPerMTok: string; outputPerMTok: string },
  ): Promise<void>;
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
    async chatModel(name, { engineUrl, model }, pricing = { inputPerMTok: '1.00', outputPerMTok: '1.00' }) {
      const res = await admin(`/admin/models/${name}`, {
        method: 'PUT',
        body: JSON.stringify({ kind: 'chat', backends: [{ baseUrl: `${engineUrl}/v1`, model }], pricing }),
      });
      if (res.status !== 201) throw new Error(`catalog model ${name}: ${res.status} ${await res.text()}`);
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
    // Generous: a start takes 2–5 s on an idle machine, and over a minute at a load of 20 (the chaos
    // suites restart replicas while everything else runs).
    const timer = setTimeout(() => reject(new Error(`API did not start in 180 s:\n${out}`)), 180_000);
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

/**
 * `npm start`'s entry point as a separate process (for multi-replica tests); `entry`: another one
 * that starts the same API (test/support/chronos-replica.ts: Chronos on a fast clock).
 */
export async function spawnApi(
  env: Record<string, string>,
  entry = 'apps/api/src/main.ts',
): Promise<ApiProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', entry], {
    cwd: root,
    // The suite's KUBECONFIG is for the tests; an API process gets a cluster only when asked.
    env: { ...process.env, KUBECONFIG: '', PORT: '0', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const { port, output } = await listeningPort(child);
  return {
    url: `http://127.0.0.1:${port}`,
    child,
    output,
    stop: () =>
      new Promise((resolve) => {
        // Gone already: exited, or killed by a signal (a SIGKILLed replica has no exit code).
        if (child.exitCode !== null || child.signalCode !== null) return resolve(child.exitCode);
        child.once('exit', (code) => resolve(code));
        child.kill('SIGTERM');
      }),
  };
}

export function bearer(key: string): Record<string, string> {
  return { authorization: `Bearer ${key}` };
}
