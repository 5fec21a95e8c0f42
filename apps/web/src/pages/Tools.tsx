import { useEffect, useState } from 'react';
import { api } from '../api.ts';
import { ErrorText } from '../ui.tsx';

export function Tools() {
  const [tools, setTools] = useState<{ id: string; name?: string; enabled?: boolean }[] | null | undefined>();
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api.tools().then(setTools, (e: Error) => setError(e.message));
  }, []);
  return (
    <>
      <h1>Tools</h1>
      <ErrorText error={error} />
      {tools === null && (
        <p role="status">
          Managed tools are not available on this server yet (its API has no <code>/api/tools</code> route).
        </p>
      )}
      {tools && tools.length === 0 && <p>No managed tools are offered.</p>}
      {tools && tools.length > 0 && (
        <ul>
          {tools.map((t) => (
            <li key={t.id}>
              {t.name ?? t.id} — {t.enabled ? 'enabled' : 'disabled'}
            </li>
          ))}
        </ul>
      )}
    </>
  );
}
