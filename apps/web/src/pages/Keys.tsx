import { useState, type FormEvent } from 'react';
import { api, type ApiKey, type CreatedKey, type KeyChange, type Scope } from '../api.ts';
import { Confirm, CopyValue, ErrorText, TableScroll, formatDate, usePolling } from '../ui.tsx';

type Period = 'day' | 'week' | 'month';
/** Grace periods offered for a rotation, in seconds (the API takes 0 to 30 days). */
const GRACE = [
  ['0', 'none: refuse the old key at once'],
  ['3600', '1 hour'],
  ['86400', '24 hours'],
  ['604800', '7 days'],
  ['2592000', '30 days'],
] as const;

/** "2.500000" → "2.50": amounts as the API writes them, trailing zeros dropped down to two decimals. */
const money = (amount: string) => amount.replace(/(\.\d{2}\d*?)0+$/, '$1');

/** A `datetime-local` value (the browser's time zone) as ISO 8601, or undefined when empty. */
const isoOf = (local: string) => (local ? new Date(local).toISOString() : undefined);

function SpendLimit({ k }: { k: ApiKey }) {
  const l = k.spendLimit;
  if (!l) return <>none</>;
  const used = Number(l.spent) / Math.max(Number(l.amount), 1e-9);
  return (
    <span title={`resets ${formatDate(l.resetsAt)}`}>
      {money(l.spent)} of {money(l.amount)} / {l.period}
      <meter min={0} max={1} value={Math.min(1, used)} aria-label={`Spent of the ${l.period}'s limit`} />
    </span>
  );
}

/** What a key's state means now: until when it works, or why it does not. */
function State({ k }: { k: ApiKey }) {
  if (k.state === 'active' && k.replacedBy) return <>rotated — works until {formatDate(k.graceExpiresAt)}</>;
  if (k.state === 'active' && k.expiresAt) return <>active — expires {formatDate(k.expiresAt)}</>;
  return <>{k.state}</>;
}

export function Keys() {
  const keys = usePolling(() => api.keys(), 10_000);
  const [created, setCreated] = useState<(CreatedKey & { previous?: ApiKey }) | null>(null);
  const [scope, setScope] = useState<Scope>('inference');
  const [error, setError] = useState<string | null>(null);
  // The key whose revocation waits for a yes (it is immediate, and cannot be undone).
  const [revoking, setRevoking] = useState<ApiKey | null>(null);
  const [rotating, setRotating] = useState<ApiKey | null>(null);
  const [grace, setGrace] = useState('86400');
  const [editing, setEditing] = useState<ApiKey | null>(null);

  const attempt = async (fn: () => Promise<void>) => {
    setError(null);
    try {
      await fn();
      keys.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };

  const create = async (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const f = new FormData(form);
    const pinned = String(f.get('pinnedModel') ?? '').trim();
    const tools = String(f.get('toolPin') ?? '')
      .split(',')
      .map((t) => t.trim())
      .filter(Boolean);
    const expiresAt = isoOf(String(f.get('expiresAt') ?? ''));
    const limit = String(f.get('limitAmount') ?? '').trim();
    await attempt(async () => {
      const key = await api.createKey({
        name: String(f.get('name')).trim(),
        scope,
        ...(pinned && scope === 'inference' ? { pinnedModel: pinned } : {}),
        ...(tools.length ? { toolPin: tools } : {}),
        ...(expiresAt ? { expiresAt } : {}),
        ...(limit ? { spendLimit: { amount: limit, period: String(f.get('limitPeriod')) as Period } } : {}),
        ...(f.get('allowDearerFallback') ? { allowDearerFallback: true } : {}),
      });
      setCreated(key);
      form.reset();
      setScope('inference');
    });
  };

  const update = async (e: FormEvent<HTMLFormElement>, k: ApiKey) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    const limit = String(f.get('limitAmount') ?? '').trim();
    const expires = String(f.get('expiresAt') ?? '');
    const change: KeyChange = {
      spendLimit: limit ? { amount: limit, period: String(f.get('limitPeriod')) as Period } : null,
      expiresAt: isoOf(expires) ?? null,
      allowDearerFallback: !!f.get('allowDearerFallback'),
    };
    await attempt(async () => {
      await api.updateKey(k.id, change);
      setEditing(null);
    });
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
            Pinned model (optional, used by /api/b/chat/completions: a catalog model, one of your endpoints,
            or auto)
            <input name="pinnedModel" maxLength={200} />
          </label>
        )}
        <label>
          Tool pin (optional, comma-separated tool ids; empty: every tool enabled for the account)
          <input name="toolPin" placeholder="olympus" />
        </label>
        <LimitFields />
        <button type="submit">Create key</button>
      </form>
      {created && (
        <section className="notice" aria-labelledby="created-title">
          <h2 id="created-title">
            Key “{created.name}” {created.previous ? 'rotated' : 'created'}
          </h2>
          <p>Copy the value now: it is shown only once. Afterwards only its prefix is shown.</p>
          {created.previous && (
            <p>
              The old key ({created.previous.prefix}…) keeps working until{' '}
              {formatDate(created.previous.graceExpiresAt)}; then every request with it is refused.
            </p>
          )}
          <CopyValue value={created.value} label={`Value of ${created.name}`} />
          <button type="button" onClick={() => setCreated(null)}>
            Done
          </button>
        </section>
      )}
      <ErrorText error={error ?? keys.error} />
      {revoking && (
        <Confirm
          title={`Revoke key ${revoking.name}?`}
          action="Yes, revoke"
          onConfirm={() => {
            setRevoking(null);
            void attempt(async () => void (await api.revokeKey(revoking.id)));
          }}
          onCancel={() => setRevoking(null)}
        >
          Requests with this key are refused at once, those in flight included. This cannot be undone. What it
          created belongs to the account and stays: endpoints keep serving and Chronos runs keep firing
          (delete them to stop them).
        </Confirm>
      )}
      {rotating && (
        <Confirm
          title={`Rotate key ${rotating.name}?`}
          action="Rotate"
          onConfirm={() => {
            setRotating(null);
            void attempt(async () => {
              const r = await api.rotateKey(rotating.id, { gracePeriodSeconds: Number(grace) });
              setCreated(r);
            });
          }}
          onCancel={() => setRotating(null)}
        >
          A new key with the same name, scope and settings replaces it (its spend limit counts both). The old
          key keeps working for the grace period, so you can deploy the new one; then it is refused.
          <label>
            Grace period
            <select value={grace} onChange={(e) => setGrace(e.target.value)}>
              {GRACE.map(([v, label]) => (
                <option key={v} value={v}>
                  {label}
                </option>
              ))}
            </select>
          </label>
        </Confirm>
      )}
      {editing && (
        <form className="card form" onSubmit={(e) => void update(e, editing)} aria-labelledby="edit-key">
          <h2 id="edit-key">Limits of key “{editing.name}”</h2>
          <LimitFields k={editing} />
          <button type="submit">Save</button>
          <button type="button" onClick={() => setEditing(null)}>
            Cancel
          </button>
        </form>
      )}
      {keys.data && (
        <TableScroll label="Your API keys">
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
                <th scope="col">Spend limit</th>
                <th scope="col">Created</th>
                <th scope="col">Last used</th>
                <th scope="col">
                  <span className="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {keys.data.data.map((k) => (
                <KeyRow
                  key={k.id}
                  k={k}
                  onLimits={setEditing}
                  onRotate={setRotating}
                  onRevoke={setRevoking}
                />
              ))}
            </tbody>
          </table>
        </TableScroll>
      )}
    </>
  );
}

/** One key's row: what it is, its state and spend, and what can be done with it. */
function KeyRow(props: {
  k: ApiKey;
  onLimits(k: ApiKey): void;
  onRotate(k: ApiKey): void;
  onRevoke(k: ApiKey): void;
}) {
  const { k, onLimits, onRotate, onRevoke } = props;
  return (
    <tr data-testid={`key-${k.name}`}>
      <td>{k.name}</td>
      <td>{k.scope}</td>
      <td>
        <code>{k.prefix}…</code>
      </td>
      <td>{k.pinnedModel ?? '—'}</td>
      <td>{k.toolPin.length ? k.toolPin.join(', ') : 'all'}</td>
      <td data-testid={`key-${k.name}-state`}>
        <State k={k} />
      </td>
      <td data-testid={`key-${k.name}-limit`}>
        <SpendLimit k={k} />
      </td>
      <td>{formatDate(k.createdAt)}</td>
      <td>{formatDate(k.lastUsedAt)}</td>
      <td>
        {k.state === 'active' && (
          <>
            <button type="button" onClick={() => onLimits(k)} aria-label={`Limits of key ${k.name}`}>
              Limits
            </button>
            {!k.replacedBy && (
              <button type="button" onClick={() => onRotate(k)} aria-label={`Rotate key ${k.name}`}>
                Rotate
              </button>
            )}
            <button
              type="button"
              className="icon danger"
              aria-label={`Revoke key ${k.name}`}
              title="Revoke (immediate)"
              onClick={() => onRevoke(k)}
            >
              <svg viewBox="0 0 24 24" width="18" height="18" aria-hidden="true" focusable="false">
                <path
                  fill="currentColor"
                  d="M9 3h6l1 2h4v2H4V5h4l1-2zm-3 6h12l-1 12H7L6 9zm4 2v8h2v-8h-2zm4 0v8h2v-8h-2z"
                />
              </svg>
            </button>
          </>
        )}
      </td>
    </tr>
  );
}

/** Expiry, spend limit and the dearer-fallback opt-in: the fields of a new key and of a key's limits. */
function LimitFields({ k }: { k?: ApiKey }) {
  const local = (iso: string | null | undefined) => {
    if (!iso) return '';
    const d = new Date(iso);
    return new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
  };
  return (
    <fieldset>
      <legend>Limits (optional)</legend>
      <label>
        Expires (your time zone; empty: never)
        <input type="datetime-local" name="expiresAt" defaultValue={local(k?.expiresAt)} />
      </label>
      <label>
        Spend limit (empty: none)
        <input
          name="limitAmount"
          inputMode="decimal"
          pattern="\d+(\.\d{1,6})?"
          placeholder="10.00"
          defaultValue={k?.spendLimit ? money(k.spendLimit.amount) : ''}
        />
      </label>
      <label>
        per
        <select name="limitPeriod" defaultValue={k?.spendLimit?.period ?? 'day'}>
          <option value="day">day (UTC)</option>
          <option value="week">week (from Monday, UTC)</option>
          <option value="month">month</option>
        </select>
      </label>
      <label>
        <input type="checkbox" name="allowDearerFallback" defaultChecked={k?.allowDearerFallback ?? false} />
        Allow fallbacks to catalog models priced above the one asked for
      </label>
    </fieldset>
  );
}
