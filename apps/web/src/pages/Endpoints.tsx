import { useEffect, useRef, useState, type FormEvent } from 'react';
import { api, type Endpoint } from '../api.ts';
import { cheapestChoice, choiceValue, hardwareName } from '../hardware.ts';
import { navigate } from '../router.ts';
import {
  Confirm,
  ErrorText,
  Link,
  StatusLabel,
  TableScroll,
  formatDate,
  useHardware,
  usePolling,
} from '../ui.tsx';
import { WakeReceipt, WakeStage } from '../wake.tsx';

export function Endpoints() {
  const list = usePolling(() => api.endpoints(), 2000);
  const hardware = useHardware();
  const [creating, setCreating] = useState(false);
  return (
    <>
      <h1>Endpoints</h1>
      <p>Dedicated endpoints of your account. Labels update live.</p>
      <button type="button" onClick={() => setCreating((c) => !c)} aria-expanded={creating}>
        {creating ? 'Cancel' : 'Create endpoint'}
      </button>
      {creating && <CreateEndpoint />}
      <ErrorText error={list.error} />
      {list.data && list.data.data.length === 0 && <p>No endpoints yet.</p>}
      {list.data && list.data.data.length > 0 && (
        <TableScroll label="Your endpoints">
          <table>
            <caption className="sr-only">Your endpoints</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Status</th>
                <th scope="col">Model</th>
                <th scope="col">Hardware</th>
                <th scope="col">Auth mode</th>
                <th scope="col">Id</th>
              </tr>
            </thead>
            <tbody>
              {list.data.data.map((e) => (
                <tr key={e.id}>
                  <td>
                    <Link to={`/endpoints/${e.id}`}>{e.name}</Link>
                  </td>
                  <td>
                    <StatusLabel label={e.label} /> <WakeStage wake={e.wake} />
                  </td>
                  <td>{e.model}</td>
                  <td>
                    {e.hardware.gpuCount} × {hardwareName(hardware.data, e.hardware.gpuType)}
                  </td>
                  <td>{e.authMode}</td>
                  <td>
                    <code>{e.id}</code>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableScroll>
      )}
    </>
  );
}

function CreateEndpoint() {
  const catalog = useHardware();
  const hardware = catalog.data ?? [];
  // Starts on the cheapest option once the catalog is here; then it is the user's choice.
  const [choice, setChoice] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    const [gpuType, gpuCount] = String(f.get('hardware')).split('|');
    setBusy(true);
    setError(null);
    try {
      const name = String(f.get('name')).trim();
      const created = await api.createEndpoint({
        ...(name ? { name } : {}),
        model: String(f.get('model')).trim(),
        hardware: { gpuType: gpuType!, gpuCount: Number(gpuCount) },
        authMode: f.get('authMode') === 'Public' ? 'Public' : 'Private',
        scaling: {
          minReplicas: Number(f.get('minReplicas')),
          maxReplicas: Number(f.get('maxReplicas')),
          idleTimeoutSeconds: Number(f.get('idleTimeoutSeconds')),
        },
      });
      navigate(`/endpoints/${created.id}`);
    } catch (err) {
      setError((err as Error).message);
      setBusy(false);
    }
  };
  return (
    <form className="card form" onSubmit={(e) => void submit(e)} aria-labelledby="create-title">
      <h2 id="create-title">New endpoint</h2>
      <label>
        Name (optional)
        <input name="name" maxLength={100} />
      </label>
      <label>
        Model (model hub id)
        <input name="model" required defaultValue="Qwen/Qwen2.5-0.5B-Instruct" />
      </label>
      <label>
        Hardware
        <select
          name="hardware"
          required
          value={choice ?? cheapestChoice(hardware) ?? ''}
          onChange={(e) => setChoice(e.target.value)}
        >
          {hardware.flatMap((h) =>
            h.allowedGpuCounts.map((n) => (
              <option key={choiceValue(h.id, n)} value={choiceValue(h.id, n)} disabled={!h.available}>
                {n} × {h.displayName} ({h.gpuMemoryGiB} GiB each){h.available ? '' : ' — unavailable'}
              </option>
            )),
          )}
        </select>
      </label>
      <label>
        Auth mode
        <select name="authMode" defaultValue="Private">
          <option value="Private">Private (a key of this account)</option>
          <option value="Public">Public (no key needed)</option>
        </select>
      </label>
      <fieldset>
        <legend>Scaling</legend>
        <label>
          Min replicas
          <input name="minReplicas" type="number" min={0} max={16} defaultValue={0} required />
        </label>
        <label>
          Max replicas
          <input name="maxReplicas" type="number" min={1} max={16} defaultValue={1} required />
        </label>
        <label>
          Idle timeout (seconds)
          <input name="idleTimeoutSeconds" type="number" min={15} defaultValue={300} required />
        </label>
      </fieldset>
      <ErrorText error={error ?? catalog.error} />
      <button type="submit" disabled={busy || hardware.length === 0}>
        {busy ? 'Creating…' : 'Create'}
      </button>
    </form>
  );
}

export function EndpointDetail({ id }: { id: string }) {
  const ep = usePolling(() => api.endpoint(id), 1500);
  const hardware = useHardware();
  const [confirming, setConfirming] = useState(false);
  const [actionError, setActionError] = useState<string | null>(null);
  const [terminated, setTerminated] = useState(false);
  if (terminated)
    return (
      <>
        <h1>Endpoint terminated</h1>
        <p role="status">
          <code>{id}</code> was terminated. <Link to="/endpoints">Back to endpoints</Link>
        </p>
      </>
    );
  const e = ep.data;
  const act = async (f: () => Promise<unknown>) => {
    setActionError(null);
    try {
      await f();
      ep.reload();
    } catch (err) {
      setActionError((err as Error).message);
    }
  };
  return (
    <>
      <p>
        <Link to="/endpoints">← Endpoints</Link>
      </p>
      <h1>{e ? e.name : id}</h1>
      <ErrorText error={ep.error} />
      {e && (
        <>
          <dl className="facts">
            <dt>Status</dt>
            <dd>
              <StatusLabel label={e.label} /> <span className="muted">({e.status})</span>
            </dd>
            {e.status === 'building' && (
              <>
                <dt>Progress</dt>
                <dd>
                  <progress aria-label="Provisioning" /> Provisioning since {formatDate(e.createdAt)}: usually
                  2–10 minutes on GPUs.
                </dd>
              </>
            )}
            {e.wake?.inProgress && (
              <>
                <dt>Wake</dt>
                <dd role="status">
                  <WakeStage wake={e.wake} />
                </dd>
              </>
            )}
            {e.wake && !e.wake.inProgress && (
              <>
                <dt>Last wake</dt>
                <dd>
                  <WakeReceipt wake={e.wake} />
                </dd>
              </>
            )}
            {e.reason && (
              <>
                <dt>Reason</dt>
                <dd>{e.reason}</dd>
              </>
            )}
            {e.message && (
              <>
                <dt>Message</dt>
                <dd>{e.message}</dd>
              </>
            )}
            <dt>Id</dt>
            <dd>
              <code>{e.id}</code>
            </dd>
            <dt>Model</dt>
            <dd>{e.model}</dd>
            <dt>Hardware</dt>
            <dd>
              {e.hardware.gpuCount} × {hardwareName(hardware.data, e.hardware.gpuType)}
            </dd>
            <dt>Replicas</dt>
            <dd>
              {e.readyReplicas} ready of {e.replicas}
            </dd>
            <dt>Base URL</dt>
            <dd>
              <code>{e.baseUrl}</code>
            </dd>
          </dl>
          <div className="actions">
            <button
              type="button"
              onClick={() => void act(() => api.wake(id))}
              disabled={e.status !== 'hibernated'}
            >
              Wake
            </button>
            <button type="button" className="danger" onClick={() => setConfirming(true)}>
              Terminate
            </button>
          </div>
          {confirming && (
            <Confirm
              title={`Terminate ${e.name}?`}
              action="Yes, terminate"
              onConfirm={() => void act(() => api.terminate(id)).then(() => setTerminated(true))}
              onCancel={() => setConfirming(false)}
            >
              The endpoint and its replicas are removed. This cannot be undone.
            </Confirm>
          )}
          <ErrorText error={actionError} />
          <Logs id={id} />
        </>
      )}
    </>
  );
}

function Logs({ id }: { id: string }) {
  const [text, setText] = useState('');
  const [error, setError] = useState<string | null>(null);
  const box = useRef<HTMLPreElement>(null);
  useEffect(() => {
    const controller = new AbortController();
    setText('');
    (async () => {
      const res = await api.logs(id, controller.signal);
      const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        setText((t) => (t + value).slice(-200_000));
      }
    })().catch((e: Error) => {
      if (!controller.signal.aborted) setError(e.message);
    });
    return () => controller.abort();
  }, [id]);
  useEffect(() => {
    const el = box.current;
    if (el) el.scrollTop = el.scrollHeight;
  }, [text]);
  return (
    <section aria-labelledby="logs-title">
      <h2 id="logs-title">Logs</h2>
      <ErrorText error={error} />
      <pre className="logs" ref={box} role="log" aria-label="Endpoint logs, streaming" tabIndex={0}>
        {text || 'Waiting for log lines…'}
      </pre>
    </section>
  );
}

export type { Endpoint };
