import { useEffect, useId, useRef, useState, type MouseEvent, type ReactNode } from 'react';
import { navigate } from './router.ts';
import { api, type Hardware, type Label } from './api.ts';

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

/**
 * The question a destructive action asks first (terminate an endpoint, revoke a key). It takes the
 * focus when it opens, so it is scrolled into view and read out even when it opens far from the
 * button that asked it (a long list of keys, a narrow screen).
 */
export function Confirm(props: {
  title: string;
  children: ReactNode;
  action: string;
  onConfirm(): void;
  onCancel(): void;
}) {
  const id = useId();
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => box.current?.focus(), []);
  return (
    <div
      role="alertdialog"
      aria-labelledby={`${id}-title`}
      aria-describedby={`${id}-text`}
      className="card confirm"
      tabIndex={-1}
      ref={box}
    >
      <h2 id={`${id}-title`}>{props.title}</h2>
      <p id={`${id}-text`}>{props.children}</p>
      <button type="button" className="danger" onClick={props.onConfirm}>
        {props.action}
      </button>
      <button type="button" className="secondary" onClick={props.onCancel}>
        Cancel
      </button>
    </div>
  );
}

/**
 * A table that scrolls sideways inside its own box on a narrow screen instead of widening the page.
 * Focusable, so keyboard users can scroll it too.
 */
export function TableScroll(props: { label: string; children: ReactNode }) {
  return (
    <div className="table-scroll" role="region" aria-label={props.label} tabIndex={0}>
      {props.children}
    </div>
  );
}

// The catalog is fixed for the API's life: one request per page load, shared by every page.
let catalog: Promise<Hardware[]> | undefined;

/** GET /api/hardware, once; `data` is null until it answers. */
export function useHardware(): { data: Hardware[] | null; error: string | null } {
  const [state, setState] = useState<{ data: Hardware[] | null; error: string | null }>({
    data: null,
    error: null,
  });
  useEffect(() => {
    let stopped = false;
    catalog ??= api.hardware().then((h) => h.data);
    catalog.then(
      (data) => !stopped && setState({ data, error: null }),
      (e: Error) => {
        catalog = undefined; // the next page tries again
        if (!stopped) setState({ data: null, error: e.message });
      },
    );
    return () => {
      stopped = true;
    };
  }, []);
  return state;
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
