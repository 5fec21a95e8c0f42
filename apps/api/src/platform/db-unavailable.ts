// Tells a lost database apart from a bug. A database that cannot be reached, was dropped, or lost
// its tables is an outage the caller should retry (503 `Service temporarily unavailable`), and at
// start-up a configuration problem named in one line; anything else stays a 500.
//
// Errors arrive in three shapes: Prisma's (a `code` such as P1001, with the driver adapter's error
// kind in `meta.driverAdapterError.cause`), node-postgres's (a SQLSTATE `code`, or a bare message
// such as "Connection terminated unexpectedly"), and Node's socket errors (ECONNREFUSED, …).

/** Why the database is unavailable, in a few words, or undefined for any other error. */
export function databaseUnavailable(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e && typeof e === 'object' && depth < 8; depth++) {
    const reason = reasonOf(e as ErrorLike);
    if (reason) return reason;
    const next = (e as ErrorLike).cause;
    e = next ?? (e as ErrorLike).meta?.driverAdapterError;
  }
  return undefined;
}

interface ErrorLike {
  code?: unknown;
  message?: unknown;
  kind?: unknown;
  cause?: unknown;
  meta?: { driverAdapterError?: { cause?: { kind?: unknown; host?: unknown; port?: unknown } } };
}

// Driver adapter error kinds (@prisma/driver-adapter-utils) that mean the database is gone.
const ADAPTER_KINDS: Record<string, string> = {
  DatabaseNotReachable: 'not reachable',
  DatabaseDoesNotExist: 'the database does not exist',
  DatabaseAccessDenied: 'access denied',
  AuthenticationFailed: 'authentication failed',
  ConnectionClosed: 'connection closed',
  TlsConnectionError: 'TLS connection failed',
  TooManyConnections: 'too many connections',
  SocketTimeout: 'timed out',
  TableDoesNotExist: 'schema missing (a table does not exist)',
};

// Prisma error codes of the same conditions (https://www.prisma.io/docs/orm/reference/error-reference).
const PRISMA_CODES: Record<string, string> = {
  P1001: 'not reachable',
  P1002: 'timed out',
  P1003: 'the database does not exist',
  P1008: 'timed out',
  P1010: 'access denied',
  P1017: 'connection closed',
  P2021: 'schema missing (a table does not exist)',
  P2024: 'timed out waiting for a connection',
};

const SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

// node-postgres's own messages for a connection that could not be made or was lost.
const PG_MESSAGES =
  /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Connection ended unexpectedly)/;

function reasonOf(e: ErrorLike): string | undefined {
  const kind = typeof e.kind === 'string' ? e.kind : undefined;
  if (kind && ADAPTER_KINDS[kind]) return ADAPTER_KINDS[kind];
  const code = typeof e.code === 'string' ? e.code : undefined;
  if (code) {
    if (PRISMA_CODES[code]) return PRISMA_CODES[code];
    if (SOCKET_CODES.has(code)) return `not reachable (${code})`;
    // SQLSTATE: class 08 connection exception, 57P0x shutdown, 3D000 no database, 42P01 no table,
    // 53300 too many connections, 28xxx authentication.
    if (/^08...$|^57P0[123]$/.test(code)) return 'connection lost';
    if (code === '3D000') return 'the database does not exist';
    if (code === '42P01') return 'schema missing (a table does not exist)';
    if (code === '53300') return 'too many connections';
    if (/^28...$/.test(code)) return 'authentication failed';
  }
  const message = typeof e.message === 'string' ? e.message : '';
  if (PG_MESSAGES.test(message)) return 'connection lost';
  return undefined;
}

/** The last line of an error's message that says something (Prisma's put the cause last). */
export function lastLine(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return (
    message
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean)
      .at(-1) ?? 'failed'
  );
}

/**
 * The one line `npm start` prints (then exits 78) when the database of DATABASE_URL cannot be used
 * at start-up, or undefined when `err` is something else. The URL is shown without its password.
 */
export function databaseStartupProblem(err: unknown, url: string): string | undefined {
  const reason = databaseUnavailable(err);
  if (!reason) return undefined;
  let shown = url;
  let name = '';
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    shown = u.toString();
    name = decodeURIComponent(u.pathname.slice(1));
  } catch {
    // config validation let it through; show it as given
  }
  const fix =
    reason === 'the database does not exist'
      ? `create it (e.g. \`createdb ${name || '<name>'}\`) or set DATABASE_URL to an existing database`
      : reason === 'authentication failed' || reason === 'access denied'
        ? 'set DATABASE_URL with a user and password the server accepts'
        : 'start PostgreSQL there or set DATABASE_URL to a server this machine can reach';
  return `Cannot use the database of DATABASE_URL (${shown}): ${reason}; ${fix}`;
}
