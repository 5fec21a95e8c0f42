import { useCallback, useEffect, useState, type ReactNode } from 'react';
import { api, setCsrfToken, type SessionInfo } from './api.ts';
import { usePath } from './router.ts';
import { EndpointDetail, Endpoints } from './pages/Endpoints.tsx';
import { Playground } from './pages/Playground.tsx';
import { Keys } from './pages/Keys.tsx';
import { Billing } from './pages/Billing.tsx';
import { Tools } from './pages/Tools.tsx';
import { CopyValue, Link } from './ui.tsx';

const NAV: { path: string; label: string }[] = [
  { path: '/endpoints', label: 'Endpoints' },
  { path: '/playground', label: 'Playground' },
  { path: '/tools', label: 'Tools' },
  { path: '/settings/keys', label: 'Settings → Keys' },
  { path: '/settings/billing', label: 'Settings → Billing' },
];

export function App() {
  const [session, setSession] = useState<SessionInfo | null>(null);
  const [error, setError] = useState<string | null>(null);
  const path = usePath();

  const load = useCallback(() => {
    api.session().then(
      (s) => {
        setCsrfToken(s.csrfToken);
        setSession(s);
      },
      (e: Error) => setError(e.message),
    );
  }, []);
  useEffect(load, [load]);

  if (error)
    return (
      <main className="center">
        <p role="alert">The API did not answer: {error}</p>
      </main>
    );
  if (!session)
    return (
      <main className="center">
        <p>Loading…</p>
      </main>
    );
  if (!session.signedIn) return <SignIn session={session} />;

  const signOut = async () => {
    await api.logout();
    setCsrfToken(undefined);
    location.assign('/');
  };
  let page: ReactNode;
  const detail = /^\/endpoints\/(endpt-[\w-]+)$/.exec(path);
  if (detail) page = <EndpointDetail id={detail[1]!} />;
  else if (path === '/playground') page = <Playground />;
  else if (path === '/settings/keys') page = <Keys />;
  else if (path === '/settings/billing') page = <Billing />;
  else if (path === '/tools') page = <Tools />;
  else page = <Endpoints />;

  return (
    <div className="shell">
      <header className="top">
        <span className="brand">Berth</span>
        <span className="who">
          Signed in as <strong>{session.account!.name}</strong>
          {session.signIn.development && <span className="badge warn">development sign-in</span>}
        </span>
        <button type="button" className="secondary" onClick={() => void signOut()}>
          Sign out
        </button>
      </header>
      <nav aria-label="Main">
        <ul>
          {NAV.map((n) => (
            <li key={n.path}>
              <Link
                to={n.path}
                current={path === n.path || (n.path === '/endpoints' && (path === '/' || !!detail))}
              >
                {n.label}
              </Link>
            </li>
          ))}
        </ul>
      </nav>
      <main>
        {session.newKey && (
          <NewKeyNotice
            value={session.newKey.value}
            onDone={() => setSession({ ...session, newKey: undefined })}
          />
        )}
        {page}
      </main>
    </div>
  );
}

function NewKeyNotice(props: { value: string; onDone(): void }) {
  return (
    <section className="notice" aria-labelledby="new-key-title">
      <h2 id="new-key-title">Welcome to Berth: your API key</h2>
      <p>
        Your account was created with a default <code>inference</code> key. Copy it now: it is shown only
        once. Afterwards only its prefix is shown.
      </p>
      <CopyValue value={props.value} label="Your new API key" />
      <button type="button" onClick={props.onDone}>
        I have copied it
      </button>
    </section>
  );
}

function SignIn({ session }: { session: SessionInfo }) {
  const error = new URLSearchParams(location.search).get('signin_error');
  const returnTo = location.pathname === '/' ? '/endpoints' : location.pathname;
  return (
    <main className="center">
      <section className="card signin" aria-labelledby="signin-title">
        <h1 id="signin-title">Sign in to Berth</h1>
        {error && (
          <p role="alert" className="error">
            {error}
          </p>
        )}
        {session.signIn.available ? (
          <>
            <a className="button" href={`${session.signIn.url}?returnTo=${encodeURIComponent(returnTo)}`}>
              Sign in with {session.signIn.label}
            </a>
            {session.signIn.development && (
              <p className="hint">
                This is the <strong>development identity provider</strong> built into Berth for local use: it
                asks for no password. Configure <code>BERTH_OIDC_ISSUER</code> for a real one.
              </p>
            )}
          </>
        ) : (
          <p role="alert">
            Sign-in is not configured on this server: set <code>BERTH_OIDC_ISSUER</code>,{' '}
            <code>BERTH_OIDC_CLIENT_ID</code> and <code>BERTH_OIDC_CLIENT_SECRET</code>.
          </p>
        )}
      </section>
    </main>
  );
}
