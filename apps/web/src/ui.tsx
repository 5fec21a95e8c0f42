import { useEffect, useRef, useState, type MouseEvent, type ReactNode } from 'react';
import { navigate } from './router.ts';
import type { Label } from './api.ts';

export function StatusLabel({ label }: { label: Label }) {
  return <span className={`status status-${label.replace(' ', '-').toLowerCase()}`}>{label}</span>;
}

export function CopyValue(props: { value: string; label: string }) {
  const [copied, setCopied] = useState(false);
  return (
    <div className="copy">
      <label>
        {props.label}
        <input
          readOnly
          value={props.value}
          onFocus={(e) => e.currentTarget.select()}
          data-testid="secret-value"
        />
      </label>
      <button
        type="button"
        onClick={() =>
          void navigator.clipboard?.writeText(props.value).then(
            () => setCopied(true),
            () => setCopied(false),
          )
        }
      >
        {copied ? 'Copied' : 'Copy'}
      </button>
    </div>
  );
}

export function ErrorText({ error }: { error: string | null }) {
  return error ? (
    <p role="alert" className="error">
      {error}
    </p>
  ) : null;
}

/** Re-runs `load` every `ms` while mounted (live labels, progress). */
export function usePolling<T>(
  load: () => Promise<T>,
  ms: number,
): { data: T | null; error: string | null; reload(): void } {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  useEffect(() => {
    let stopped = false;
    const run = () =>
      loadRef.current().then(
        (d) => {
          if (stopped) return;
          setData(d);
          setError(null);
        },
        (e: Error) => !stopped && setError(e.message),
      );
    void run();
    const timer = setInterval(run, ms);
    return () => {
      stopped = true;
      clearInterval(timer);
    };
  }, [ms, tick]);
  return { data, error, reload: () => setTick((t) => t + 1) };
}

export function formatDate(iso: string | null): string {
  return iso ? new Date(iso).toLocaleString() : '—';
}

export function Link(props: { to: string; children: ReactNode; current?: boolean }) {
  const go = (e: MouseEvent) => {
    if (e.metaKey || e.ctrlKey || e.shiftKey) return;
    e.preventDefault();
    navigate(props.to);
  };
  return (
    <a href={props.to} onClick={go} aria-current={props.current ? 'page' : undefined}>
      {props.children}
    </a>
  );
}
