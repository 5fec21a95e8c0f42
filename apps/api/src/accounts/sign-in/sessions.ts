// Dashboard sessions: express-session with its data in PostgreSQL (./session-repository.ts).
//
// Every request that carries the cookie reads the row, and signing out deletes it, so a sign-out
// ends the session on every API replica at once. The row's key is the SHA-256 of the session id:
// a copy of the table does not hold usable cookies. Sessions last BERTH_SESSION_TTL_HOURS from
// sign-in (no sliding expiry: that would write on every request).
import { createHash, createHmac, randomBytes } from 'node:crypto';
import type { RequestHandler } from 'express';
import session from 'express-session';
import type { Logger } from 'pino';
import type { SessionRepository } from './session-repository.ts';
import { SESSION_COOKIE } from '../../http/session.ts';

declare module 'express-session' {
  interface SessionData {
    /** Who signed in (shown in the dashboard). */
    identity: { issuer: string; subject: string; name: string };
    /** The sign-in in progress: PKCE verifier, state and nonce, and where to return. */
    oidc: { verifier: string; state: string; nonce: string; redirectUri: string; returnTo: string };
    /** The default key created at signup: shown once by GET /auth/session, then dropped. */
    newKey: { id: string; name: string; scope: string; prefix: string; value: string };
  }
}

const hashId = (sid: string) => createHash('sha256').update(sid).digest('hex');

/** express-session's store over the sessions repository. */
class PostgresSessionStore extends session.Store {
  private readonly repo: SessionRepository;
  private readonly logger: Logger;

  constructor(repo: SessionRepository, logger: Logger) {
    super();
    this.repo = repo;
    this.logger = logger;
  }

  override get(sid: string, cb: (err: unknown, s?: session.SessionData | null) => void): void {
    this.repo.get(hashId(sid), new Date()).then(
      (row) => cb(null, row ? (row.data as session.SessionData) : null),
      (err: unknown) => cb(err),
    );
  }

  override set(sid: string, s: session.SessionData, cb?: (err?: unknown) => void): void {
    const expiresAt = s.cookie.expires ? new Date(s.cookie.expires) : new Date(Date.now() + 3_600_000);
    this.repo.set(hashId(sid), { accountId: s.accountId ?? null, data: s, expiresAt }).then(
      () => cb?.(),
      (err: unknown) => cb?.(err),
    );
  }

  override destroy(sid: string, cb?: (err?: unknown) => void): void {
    this.repo.destroy(hashId(sid)).then(
      () => cb?.(),
      (err: unknown) => cb?.(err),
    );
  }

  purge(): void {
    this.repo.purgeExpired(new Date()).then(
      (count) => count && this.logger.info({ count }, 'deleted expired dashboard sessions'),
      (err: unknown) => this.logger.warn({ err }, 'could not delete expired dashboard sessions'),
    );
  }
}

export interface Sessions {
  /** The session middleware (mounted on /api and /auth only: static files need no database read). */
  middleware: RequestHandler;
  close(): void;
}

export function dashboardSessions(deps: {
  repo: SessionRepository;
  /** Signs the cookie; every replica must share it (derived from ADMIN_TOKEN). */
  secret: string;
  ttlHours: number;
  logger: Logger;
}): Sessions {
  const store = new PostgresSessionStore(deps.repo, deps.logger);
  const timer = setInterval(() => store.purge(), 3_600_000);
  timer.unref();
  const middleware = session({
    name: SESSION_COOKIE,
    store,
    secret: createHmac('sha256', deps.secret).update('berth dashboard session cookie').digest('hex'),
    resave: false,
    saveUninitialized: false,
    unset: 'destroy',
    cookie: {
      httpOnly: true,
      // Secure whenever the request came over HTTPS (behind a proxy: TRUST_PROXY=true). Sign-in
      // refuses plain HTTP except on a loopback address (./routes.ts), so a cookie without Secure
      // is only ever set for http://localhost.
      secure: 'auto',
      sameSite: 'lax',
      path: '/',
      maxAge: deps.ttlHours * 3_600_000,
    },
  });
  return { middleware, close: () => clearInterval(timer) };
}

export function newCsrfToken(): string {
  return randomBytes(24).toString('base64url');
}
