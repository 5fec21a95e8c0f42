import { useEffect, useRef, useState, type FormEvent } from 'react';
import { api, type Endpoint } from '../api.ts';
import { ErrorText, StatusLabel, usePolling } from '../ui.tsx';
import { WakeStage } from '../wake.tsx';

interface Message {
  role: 'user' | 'assistant';
  content: string;
}

/**
 * Whether a catalog model answers chat: GET /api/models is OpenAI's shape, which says nothing of the
 * kind; when the API adds `kind`, embedding (and plain completion) models are left out. Without it
 * every model is offered, as before.
 */
const chats = (m: { id: string }) => {
  const kind: unknown = (m as { kind?: unknown }).kind;
  return kind === undefined || kind === 'chat';
};

export function Playground() {
  // Live, like the endpoints page: a sleeping endpoint this page wakes shows WAKING UP, then ONLINE.
  const list = usePolling(() => api.endpoints(), 2000);
  const endpoints = list.data?.data ?? [];
  const [models, setModels] = useState<string[]>([]);
  const [olympus, setOlympus] = useState(false);
  const [target, setTarget] = useState('');
  const [messages, setMessages] = useState<Message[]>([]);
  const [busy, setBusy] = useState(false);
  const [waking, setWaking] = useState<Endpoint | null>(null);
  const [error, setError] = useState<string | null>(null);
  const abort = useRef<AbortController | null>(null);

  const firstEndpoint = endpoints[0]?.id;
  useEffect(() => {
    if (firstEndpoint) setTarget((t) => t || `d:${firstEndpoint}`);
  }, [firstEndpoint]);
  useEffect(() => {
    api.models().then(
      (r) => setModels(r.data.filter(chats).map((m) => m.id)),
      () => {},
    );
    // `auto` lets Olympus choose; without Olympus enabled for the account the API refuses it.
    api.tools().then(
      (r) => setOlympus(r.data.some((t) => t.tool_id === 'olympus' && t.enabled)),
      () => {},
    );
    return () => abort.current?.abort();
  }, []);

  const send = async (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    const prompt = String(new FormData(form).get('prompt')).trim();
    if (!prompt || !target) return;
    form.reset();
    const history: Message[] = [...messages, { role: 'user', content: prompt }];
    setMessages([...history, { role: 'assistant', content: '' }]);
    setError(null);
    setBusy(true);
    const controller = new AbortController();
    abort.current = controller;
    const endpointId = target.startsWith('d:') ? target.slice(2) : undefined;
    const endpoint = endpoints.find((x) => x.id === endpointId);
    // A sleeping endpoint wakes on this request (spec §3): say so until the first token arrives.
    let first = true;
    let poll: ReturnType<typeof setInterval> | undefined;
    if (endpointId) {
      const fresh = await api.endpoint(endpointId).catch(() => endpoint);
      if (fresh && (fresh.status === 'hibernated' || fresh.status === 'waking')) {
        setWaking({ ...fresh, status: 'waking', label: 'WAKING UP' });
        poll = setInterval(() => {
          api.endpoint(endpointId).then(
            (x) =>
              first &&
              setWaking(x.status === 'hibernated' ? { ...x, status: 'waking', label: 'WAKING UP' } : x),
            () => {},
          );
        }, 1000);
      }
    }
    try {
      await api.chat(
        { endpointId, model: endpoint?.model ?? target.slice(2) },
        history,
        (token) => {
          if (first) {
            first = false;
            setWaking(null);
          }
          setMessages((m) => {
            const last = m[m.length - 1]!;
            return [...m.slice(0, -1), { ...last, content: last.content + token }];
          });
        },
        controller.signal,
      );
    } catch (err) {
      if (!controller.signal.aborted) setError((err as Error).message);
    } finally {
      first = false;
      clearInterval(poll);
      setWaking(null);
      setBusy(false);
      list.reload(); // the endpoint it woke is up now: say so without waiting for the next poll
    }
  };

  return (
    <>
      <h1>Playground</h1>
      <form className="card form" onSubmit={(e) => void send(e)}>
        <label>
          Model or endpoint
          <select value={target} onChange={(e) => setTarget(e.target.value)} required>
            <option value="" disabled>
              Choose…
            </option>
            {endpoints.length > 0 && (
              <optgroup label="Your dedicated endpoints">
                {endpoints.map((x) => (
                  <option key={x.id} value={`d:${x.id}`}>
                    {x.name} ({x.model}) — {x.label}
                  </option>
                ))}
              </optgroup>
            )}
            {(olympus || models.length > 0) && (
              <optgroup label="Elastic models">
                {olympus && <option value="e:auto">auto (Olympus chooses the model)</option>}
                {models.map((m) => (
                  <option key={m} value={`e:${m}`}>
                    {m}
                  </option>
                ))}
              </optgroup>
            )}
          </select>
        </label>
        <div className="chat" aria-live="polite" aria-label="Conversation">
          {messages.map((m, i) => (
            <p key={i} className={`msg ${m.role}`} data-testid={`message-${m.role}`}>
              <strong>{m.role === 'user' ? 'You' : 'Model'}:</strong> {m.content}
            </p>
          ))}
        </div>
        {waking && (
          <p role="status" className="waking">
            <StatusLabel label="WAKING UP" /> The endpoint was sleeping and is waking up; your answer follows
            (usually within about a minute). <WakeStage wake={waking.wake} />
          </p>
        )}
        <label>
          Message
          <textarea name="prompt" rows={3} required disabled={busy} />
        </label>
        <ErrorText error={error} />
        <button type="submit" disabled={busy || !target}>
          {busy ? 'Answering…' : 'Send'}
        </button>
      </form>
    </>
  );
}
