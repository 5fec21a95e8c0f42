// A lost database (issue 21, item 7), against real PostgreSQL behind a TCP proxy the test cuts:
// readiness names the problem, calls answer 503 `Service temporarily unavailable` (not 500), an
// empty re-created database is not ready, start-up without a usable database is one line and exit
// 78, and usage rows pending at shutdown survive a database that is gone.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { openDatabase } from '@berth/db';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { createTestDatabase, sql, type TestDatabase } from '@berth/test/support/postgres';
import { tcpProxy, throughProxy, type TcpProxy } from '@berth/test/support/tcp-proxy';
import { importSpooledUsage, usageRecorder } from '../src/dedicated/proxy/usage.ts';
import { usageRepository } from '../src/dedicated/proxy/usage-repository.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const UNAVAILABLE = { error: 'Service temporarily unavailable', code: 'service_unavailable' };
const cleanups: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

async function proxied(label: string): Promise<{ db: TestDatabase; proxy: TcpProxy; url: string }> {
  const db = await createTestDatabase(label);
  const proxy = await tcpProxy({ host: new URL(db.url).hostname, port: Number(new URL(db.url).port) });
  cleanups.push(
    () => db.drop(),
    () => proxy.close(),
  );
  return { db, proxy, url: throughProxy(db.url, proxy) };
}

const readyz = async (api: TestApi) => {
  const res = await fetch(`${api.url}/readyz`);
  return {
    status: res.status,
    body: (await res.json()) as { status: string; checks: Record<string, string> },
  };
};

describe('start-up without a usable database', () => {
  const runMain = (url: string) => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'apps/api/src/main.ts'], {
      cwd: root,
      env: { ...process.env, KUBECONFIG: '', PORT: '0', DATABASE_URL: url, ADMIN_TOKEN: 'x'.repeat(20) },
      encoding: 'utf8',
      timeout: 60_000,
    });
    // oidc-provider warns about Node 24 on load; that line is not ours.
    const lines = r.stderr
      .trim()
      .split('\n')
      .filter((l) => !l.startsWith('oidc-provider WARNING'));
    return { status: r.status, lines };
  };

  it('an unreachable server: one line naming DATABASE_URL (password hidden), exit 78', async () => {
    const { proxy, url } = await proxied('startcut');
    proxy.cut();
    const withPassword = url.replace('postgres@', 'postgres:s3cret@');
    const r = runMain(withPassword);
    expect(r.lines).toEqual([
      `Cannot use the database of DATABASE_URL (${withPassword.replace('s3cret', '***')}): not reachable; start PostgreSQL there or set DATABASE_URL to a server this machine can reach`,
    ]);
    expect(r.status).toBe(78);
  });

  it('a database that does not exist: says how to create it, exit 78', async () => {
    const { db } = await proxied('startmissing');
    const missing = db.url.replace(/\/[^/]+$/, '/berth_no_such_database');
    const r = runMain(missing);
    expect(r.lines).toEqual([
      `Cannot use the database of DATABASE_URL (${missing}): the database does not exist; create it (e.g. \`createdb berth_no_such_database\`) or set DATABASE_URL to an existing database`,
    ]);
    expect(r.status).toBe(78);
  });
});

describe('the database lost under a running API', () => {
  it('unreachable: /readyz names it, calls answer 503, nothing is written; all back when it returns', async () => {
    const { db, proxy, url } = await proxied('outage');
    const api = await startTestApi({}, { ...db, url });
    cleanups.push(() => api.close());
    const acct = await api.newAccount();
    expect(await readyz(api)).toEqual({ status: 200, body: { status: 'ready', checks: { database: 'ok' } } });
    const keysBefore = await sql(db.url, 'SELECT id FROM api_keys');

    proxy.cut();
    const r = await readyz(api);
    expect(r.status).toBe(503);
    expect(r.body.status).toBe('not ready');
    expect(r.body.checks.database).toMatch(/^(connection closed|connection lost|not reachable)$/);

    const list = await fetch(`${api.url}/api/keys`, { headers: bearer(acct.global) });
    expect(list.status).toBe(503);
    expect(list.headers.get('retry-after')).toBe('5');
    expect(await list.json()).toEqual(UNAVAILABLE);
    const create = await fetch(`${api.url}/api/keys`, {
      method: 'POST',
      headers: { ...bearer(acct.global), 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'during outage', scope: 'inference' }),
    });
    expect(create.status).toBe(503);
    expect(await create.json()).toEqual(UNAVAILABLE);
    const admin = await api.admin('/admin/accounts', { method: 'POST', body: JSON.stringify({ name: 'x' }) });
    expect(admin.status).toBe(503);

    proxy.restore();
    await eventually(async () => (await readyz(api)).status === 200, { timeout: 20_000 });
    const after = await fetch(`${api.url}/api/keys`, { headers: bearer(acct.global) });
    expect(after.status).toBe(200);
    expect(await sql(db.url, 'SELECT id FROM api_keys')).toEqual(keysBefore);
  });

  it('dropped and re-created empty: not ready (schema missing), calls answer 503', async () => {
    const db = await createTestDatabase('recreated');
    cleanups.push(() => db.drop());
    const api = await startTestApi({}, db);
    cleanups.push(() => api.close());
    const acct = await api.newAccount();
    expect((await readyz(api)).status).toBe(200);

    const server = new URL(db.url);
    server.pathname = '/postgres';
    await sql(server.toString(), `DROP DATABASE ${db.name} WITH (FORCE)`);
    await sql(server.toString(), `CREATE DATABASE ${db.name}`);

    const r = await eventually(
      async () => {
        const x = await readyz(api);
        return x.body.checks.database?.startsWith('schema') ? x : false;
      },
      { timeout: 20_000 },
    );
    expect(r.status).toBe(503);
    expect(r.body.checks.database).toBe('schema missing (a table does not exist)');
    const list = await fetch(`${api.url}/api/keys`, { headers: bearer(acct.global) });
    expect(list.status).toBe(503);
    expect(await list.json()).toEqual(UNAVAILABLE);
  });
});

describe('usage pending at shutdown with the database gone', () => {
  it('is retried, then spooled to the data dir and written at the next start', async () => {
    const { db, proxy, url } = await proxied('spool');
    // The schema, through a direct connection.
    const api = await startTestApi({}, db);
    await api.close();
    const spoolDir = mkdtempSync(path.join(tmpdir(), 'berth-spool-'));
    cleanups.push(() => rmSync(spoolDir, { recursive: true, force: true }));
    const conn = await openDatabase({ kind: 'postgres', url });
    cleanups.push(() => conn.close());
    const logger = pino({ level: 'silent' });

    const recorder = usageRecorder(usageRepository(conn.prisma), logger, 60_000, {
      spoolDir,
      closeRetryMs: 1_000,
    });
    for (let i = 0; i < 3; i++)
      recorder.record({ accountId: 'acct-a', endpointId: 'endpt-a', promptTokens: 5, completionTokens: 7 });
    proxy.cut();
    await recorder.close();
    const files = readdirSync(spoolDir);
    expect(files).toHaveLength(1);
    expect(await sql(db.url, 'SELECT * FROM endpoint_usage')).toEqual([]);

    proxy.restore();
    expect(await importSpooledUsage(usageRepository(conn.prisma), spoolDir, logger)).toBe(1);
    expect(existsSync(path.join(spoolDir, files[0]!))).toBe(false);
    expect(
      await sql(
        db.url,
        'SELECT requests, prompt_tokens::int AS p, completion_tokens::int AS c FROM endpoint_usage',
      ),
    ).toEqual([{ requests: 3, p: 15, c: 21 }]);
  });

  it('a database that comes back within the retry window gets the rows directly', async () => {
    const { db, proxy, url } = await proxied('spoolback');
    const api = await startTestApi({}, db);
    await api.close();
    const spoolDir = mkdtempSync(path.join(tmpdir(), 'berth-spool-'));
    cleanups.push(() => rmSync(spoolDir, { recursive: true, force: true }));
    const conn = await openDatabase({ kind: 'postgres', url });
    cleanups.push(() => conn.close());
    const recorder = usageRecorder(usageRepository(conn.prisma), pino({ level: 'silent' }), 60_000, {
      spoolDir,
      closeRetryMs: 10_000,
    });
    recorder.record({ accountId: 'acct-b', endpointId: 'endpt-b', promptTokens: 1, completionTokens: 2 });
    proxy.cut();
    setTimeout(() => proxy.restore(), 1_000);
    await recorder.close();
    expect(readdirSync(spoolDir)).toEqual([]);
    expect(await sql(db.url, 'SELECT requests FROM endpoint_usage')).toEqual([{ requests: 1 }]);
  });
});
