// A fresh, empty PostgreSQL database per test file, on a real server: TEST_DATABASE_URL (a server
// where the tests may create and drop databases), else the local server on 127.0.0.1:5432, else —
// where a Docker engine answers — a throw-away testcontainers PostgreSQL.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import pg from 'pg';

const LOCAL = 'postgresql://postgres@127.0.0.1:5432/postgres';

let serverUrl: Promise<string> | undefined;

async function reachable(url: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await c.connect();
    return true;
  } catch {
    return false;
  } finally {
    await c.end().catch(() => {});
  }
}

function dockerAvailable(): boolean {
  try {
    execFileSync('docker', ['info'], { stdio: 'ignore', timeout: 5000 });
    return true;
  } catch {
    return false;
  }
}

async function resolveServer(): Promise<string> {
  const explicit = process.env.TEST_DATABASE_URL;
  if (explicit) {
    if (!(await reachable(explicit)))
      throw new Error(`TEST_DATABASE_URL (${redact(explicit)}) is not reachable`);
    return explicit;
  }
  if (await reachable(LOCAL)) return LOCAL;
  if (dockerAvailable()) {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:17-alpine').start();
    return container.getConnectionUri();
  }
  throw new Error(
    `No PostgreSQL for the tests: set TEST_DATABASE_URL, start a server on 127.0.0.1:5432, or run a Docker engine`,
  );
}

function redact(url: string): string {
  const u = new URL(url);
  if (u.password) u.password = '***';
  return u.toString();
}

export interface TestDatabase {
  url: string;
  name: string;
  drop(): Promise<void>;
}

export async function createTestDatabase(label = 'test'): Promise<TestDatabase> {
  const server = await (serverUrl ??= resolveServer());
  const name = `berth_${label.replace(/\W/g, '_').slice(0, 20)}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: server });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(server);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    async drop() {
      const c = new pg.Client({ connectionString: server });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}

/** One query on its own connection (tests and benchmarks reading what the code under test wrote). */
export async function sql<T extends pg.QueryResultRow = Record<string, unknown>>(
  url: string,
  text: string,
  values: unknown[] = [],
): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<T>(text, values)).rows;
  } finally {
    await c.end();
  }
}

/**
 * Transactions committed or rolled back in the database so far, from PostgreSQL's own statistics.
 * Backends publish their counters at most once a second, and at exit: this waits for the first.
 * The read itself costs one transaction.
 */
export async function transactionCount(url: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await new Promise((r) => setTimeout(r, 1500));
    await c.query('SELECT pg_stat_clear_snapshot()');
    const { rows } = await c.query<{ n: string }>(
      'SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = current_database()',
    );
    return Number(rows[0]!.n);
  } finally {
    await c.end();
  }
}
