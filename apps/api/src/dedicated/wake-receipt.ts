// Where a wake is, as the API tells its callers: the stage of the wake in progress (the held
// streams' `: waking <stage> <elapsed>s` comments, the dashboard's WAKING UP banner, the CLI's
// `endpoints wait`) and the receipt of the last one (GET /api/endpoints/{id}). Read from the
// resource: the API's wake-requested annotation, and status.lastWake, which the operator writes
// stage by stage. Pure.
import {
  ANNOTATION_WAKE_REQUESTED,
  type DedicatedEndpoint,
  type DedicatedEndpointStatus,
  type WakeReceipt,
} from '@berth/crds';
import { z } from 'zod';

/**
 * What a wake in progress waits for: the operator to write the replica count (`signal`), a node
 * (`scheduled`), the engine image on it (`image`), the engine to load (`engine`), the API to forward
 * to it (`ready`). A wake that is over is `done`.
 */
export const WAKE_STAGES = ['signal', 'scheduled', 'image', 'engine', 'ready'] as const;
export type WakeStage = (typeof WAKE_STAGES)[number];

const time = (v: string | undefined): number => (v ? Date.parse(v) : NaN);
const iso = z.string().nullable();
const secondsOrNull = z.number().nullable();

export const wakeView = z
  .object({
    inProgress: z.boolean().describe('A wake is going on now'),
    stage: z
      .enum([...WAKE_STAGES, 'done'])
      .describe(
        'What the wake waits for: signal (the replica count written), scheduled (a node), image (the engine image on it), engine (weights loaded), ready (the first call forwarded); done when it is over',
      ),
    startedAt: iso.describe('The wake signal (a call or POST …/wake reached the sleeping endpoint)'),
    elapsedSeconds: secondsOrNull.describe(
      'Since the wake signal: so far, or in all for a wake that is over',
    ),
    requestedAt: iso,
    scaledAt: iso.describe('The operator wrote the replica count'),
    scheduledAt: iso.describe('The woken replica was scheduled on a node'),
    imageReadyAt: iso.describe('Its engine container was running (the image was on the node)'),
    engineReadyAt: iso.describe('Its engine was Ready (weights loaded, serving)'),
    firstByteAt: iso.describe('The API forwarded the first byte of a held call’s answer'),
    node: iso.describe('Where the woken replica runs'),
    placement: z
      .enum(['warm', 'cold'])
      .nullable()
      .describe('warm: on a node the endpoint ran on before (its caches hold the weights); cold: any other'),
    seconds: z
      .object({
        signal: secondsOrNull.describe('Wake signal → replica count written'),
        scheduled: secondsOrNull.describe('→ scheduled on a node'),
        image: secondsOrNull.describe('→ engine container running'),
        engine: secondsOrNull.describe('→ engine Ready'),
        firstByte: secondsOrNull.describe('→ first byte forwarded'),
        total: secondsOrNull.describe('Wake signal → first byte (→ engine Ready when no call waited)'),
      })
      .describe('Each stage’s duration (null until it is reached)'),
  })
  .nullable()
  .describe('The wake in progress, or the last one (status.lastWake); null when it never slept');
export type WakeView = z.infer<typeof wakeView>;

/** The receipt of the wake in progress: the one whose scale is the wake's (status.wakeStartedAt). */
function currentReceipt(s: DedicatedEndpointStatus | undefined): WakeReceipt | undefined {
  const w = s?.lastWake;
  return w && (!s.wakeStartedAt || w.scaledAt === s.wakeStartedAt) ? w : undefined;
}

/** The wake-requested annotation when it asks for a wake of the current hibernation. */
function requestedNow(e: DedicatedEndpoint): string | undefined {
  const r = e.metadata.annotations?.[ANNOTATION_WAKE_REQUESTED];
  if (!r || Number.isNaN(time(r))) return undefined;
  const hibernated = time(e.status?.hibernatedAt);
  return Number.isNaN(hibernated) || time(r) >= hibernated ? r : undefined;
}

export interface WakeProgress {
  stage: WakeStage;
  /** The wake signal, when known (ms since the epoch). */
  startedAt: number | undefined;
}

/** The wake going on now, or undefined when the endpoint is neither waking nor asked to wake. */
export function wakeProgress(e: DedicatedEndpoint | undefined): WakeProgress | undefined {
  if (!e) return undefined;
  const phase = e.status?.phase;
  const requested = requestedNow(e);
  if (phase !== 'waking' && !(phase === 'hibernated' && requested)) return undefined;
  const w = phase === 'waking' ? currentReceipt(e.status) : undefined;
  const stage: WakeStage = !w
    ? 'signal'
    : !w.scheduledAt
      ? 'scheduled'
      : !w.imageReadyAt
        ? 'image'
        : !w.engineReadyAt
          ? 'engine'
          : 'ready';
  const start = time(w?.requestedAt ?? requested ?? w?.scaledAt ?? e.status?.wakeStartedAt);
  return { stage, startedAt: Number.isNaN(start) ? undefined : start };
}

/** The wake as GET /api/endpoints/{id} shows it. */
export function viewWake(e: DedicatedEndpoint, now: number): WakeView {
  const progress = wakeProgress(e);
  const w = progress ? currentReceipt(e.status) : e.status?.lastWake;
  if (!progress && !w) return null;
  const span = (a: string | undefined, b: string | undefined) => {
    const d = time(b) - time(a);
    return Number.isNaN(d) ? null : Math.max(0, d) / 1000;
  };
  const startedAt =
    progress?.startedAt !== undefined ? new Date(progress.startedAt).toISOString() : (w?.requestedAt ?? null);
  const end = w?.firstByteAt ?? w?.engineReadyAt;
  const elapsedSeconds = progress
    ? progress.startedAt === undefined
      ? null
      : Math.max(0, now - progress.startedAt) / 1000
    : span(w?.requestedAt ?? w?.scaledAt, end);
  return {
    inProgress: !!progress,
    stage: progress?.stage ?? 'done',
    startedAt,
    elapsedSeconds,
    requestedAt: w?.requestedAt ?? null,
    scaledAt: w?.scaledAt ?? null,
    scheduledAt: w?.scheduledAt ?? null,
    imageReadyAt: w?.imageReadyAt ?? null,
    engineReadyAt: w?.engineReadyAt ?? null,
    firstByteAt: w?.firstByteAt ?? null,
    node: w?.node ?? null,
    placement: w?.placement ?? null,
    seconds: {
      signal: span(w?.requestedAt, w?.scaledAt),
      scheduled: span(w?.scaledAt, w?.scheduledAt),
      image: span(w?.scheduledAt, w?.imageReadyAt),
      engine: span(w?.imageReadyAt, w?.engineReadyAt),
      firstByte: span(w?.engineReadyAt, w?.firstByteAt),
      total: progress ? null : span(w?.requestedAt ?? w?.scaledAt, end),
    },
  };
}

/** A complete wake's duration in seconds (signal, else scale, → engine Ready), for the wake-time estimate. */
export function receiptSeconds(w: WakeReceipt | undefined): { key: string; seconds: number } | undefined {
  const from = w?.requestedAt ?? w?.scaledAt;
  const d = time(w?.engineReadyAt) - time(from);
  return from && !Number.isNaN(d) ? { key: from, seconds: Math.max(0, d) / 1000 } : undefined;
}
