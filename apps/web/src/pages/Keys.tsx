import { useState, type FormEvent } from 'react';
import { api, type CreatedKey, type Scope } from '../api.ts';
import { CopyValue, ErrorText, formatDate, usePolling } from '../ui.tsx';

export function Keys() {
  const keys = usePolling(() => api.keys(), 10_000);
  const [created, setCreated] = useState<CreatedKey | null>(null);
  const [scope, setScope] = useState<Scope>('inference');
  const [error, setError] = useState<string | null>(null);

  const create = async (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const f = new FormData(form);
    const pinned = String(f.get('pinnedModel') ?? '').trim();
    const tools = String(f.get('toolPin') ?? '')
      .split(',')
      .map((t) => t.trim())
      .filter(Boolean);
    setError(null);
    try {
      const key = await api.createKey({
        name: String(f.get('name')).trim(),
        scope,
        ...(pinned && scope === 'inference' ? { pinnedModel: pinned } : {}),
        ...(tools.length ? { toolPin: tools } : {}),
      });
      setCreated(key);
      form.reset();
      setScope('inference');
      keys.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  const revoke = async (id: string) => {
    setError(null);
    try {
      await api.revokeKey(id);
      keys.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };

  return (
    <>
      <h1>Settings → Keys</h1>
      <form className="card form" onSubmit={(e) => void create(e)} aria-labelledby="new-key">
        <h2 id="new-key">Create a key</h2>
        <label>
          Name
          <input name="name" required maxLength={100} />
        </label>
        <label>
          Scope
          <select name="scope" value={scope} onChange={(e) => setScope(e.target.value as Scope)}>
            <option value="inference">inference — call models and your endpoints</option>
            <option value="compute">compute — provision endpoints (CLI, Terraform)</option>
            <option value="global">global — everything, including billing (highly privileged)</option>
          </select>
        </label>
        {scope === 'inference' && (
          <label>
            Pinned model (optional, used by /api/b/chat/completions)
            <input name="pinnedModel" maxLength={200} />
          </label>
        )}
        <label>
          Tool pin (optional, comma-separated tool ids; empty: every tool enabled for the account)
          <input name="toolPin" placeholder="olympus" />
        </label>
        <button type="submit">Create key</button>
      </form>
      {created && (
        <section className="notice" aria-labelledby="created-title">
          <h2 id="created-title">Key “{created.name}” created</h2>
          <p>Copy the value now: it is shown only once. Afterwards only its prefix is shown.</p>
          <CopyValue value={created.value} label={`Value of ${created.name}`} />
          <button type="button" onClick={() => setCreated(null)}>
            Done
          </button>
        </section>
      )}
      <ErrorText error={error ?? keys.error} />
      {keys.data && (
        <table>
          <caption className="sr-only">Your API keys</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Scope</th>
              <th scope="col">Key</th>
              <th scope="col">Pinned model</th>
              <th scope="col">Tool pin</th>
              <th scope="col">State</th>
              <th scope="col">Created</th>
              <th scope="col">Last used</th>
              <th scope="col">
                <span className="sr-only">Revoke</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {keys.data.data.map((k) => (
              <tr key={k.id} data-testid={`key-${k.name}`}>
                <td>{k.name}</td>
                <td>{k.scope}</td>
                <td>
                  <code>{k.prefix}…</code>
                </td>
                <td>{k.pinnedModel ?? '—'}</td>
                <td>{k.toolPin.length ? k.toolPin.join(', ') : 'all'}</td>
                <td>{k.state}</td>
                <td>{formatDate(k.createdAt)}</td>
                <td>{formatDate(k.lastUsedAt)}</td>
                <td>
                  {k.state === 'active' && (
                    <button
                      type="button"
                      className="icon danger"
                      aria-label={`Revoke key ${k.name}`}
                      title="Revoke (immediate)"
                      onClick={() => void revoke(k.id)}
                    >
                      <svg viewBox="0 0 24 24" width="18" height="18" aria-hidden="true" focusable="false">
                        <path
                          fill="currentColor"
                          d="M9 3h6l1 2h4v2H4V5h4l1-2zm-3 6h12l-1 12H7L6 9zm4 2v8h2v-8h-2zm4 0v8h2v-8h-2z"
                        />
                      </svg>
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}
