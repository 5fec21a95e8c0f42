// A wake as the dashboard tells it: the stage a wake in progress is at and how long it has run (the
// WAKING UP banner of the endpoint page and the playground), and the receipt of the last one. Both
// read the `wake` of GET /api/endpoints/{id}, which the API builds from status.lastWake.
import { useEffect, useState } from 'react';
import type { Endpoint } from './api.ts';
import { receiptText, stageText } from '../../cli/src/wake-text.ts';

type Wake = NonNullable<Endpoint['wake']>;

/**
 * The elapsed seconds of a wake in progress, ticking between polls: the API's figure when it was
 * read, plus the time since.
 */
function useElapsed(w: Wake | null | undefined): number | null {
  const [now, setNow] = useState(() => Date.now());
  const [read, setRead] = useState(() => ({ at: Date.now(), elapsed: w?.elapsedSeconds ?? null }));
  useEffect(() => setRead({ at: Date.now(), elapsed: w?.elapsedSeconds ?? null }), [w?.elapsedSeconds]);
  useEffect(() => {
    if (!w?.inProgress) return;
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, [w?.inProgress]);
  if (read.elapsed === null) return null;
  return read.elapsed + (w?.inProgress ? Math.max(0, now - read.at) / 1000 : 0);
}

/** The stage and elapsed time of a wake in progress (or nothing when none is known yet). */
export function WakeStage({ wake }: { wake: Wake | null | undefined }) {
  const elapsed = useElapsed(wake);
  if (!wake?.inProgress) return null;
  return (
    <span className="wake-stage" data-testid="wake-stage">
      {stageText(wake)}
      {elapsed !== null && <> · {Math.floor(elapsed)} s</>}
    </span>
  );
}

/** The receipt of a finished wake: its total, where it landed, and each stage's duration. */
export function WakeReceipt({ wake }: { wake: Wake }) {
  const r = receiptText(wake);
  return (
    <span data-testid="wake-receipt">
      {r.summary} <span className="muted">— {r.stages}</span>
    </span>
  );
}
