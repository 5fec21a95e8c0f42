// Dedicated GPU time as pure functions: what an observation does to an endpoint's meter, and what a
// week's invoice lines are. The metering repository applies them under row locks.
import { gpuTimeAmount } from '../platform/money.ts';

/** What ran for an endpoint, priced: a replica count of `gpusPerReplica` GPUs at a rate. */
export interface GpuShape {
  accountId: string;
  instanceType: string;
  /** The GPU's label from the catalog ("NVIDIA H100 80GB"). */
  gpuType: string;
  gpusPerReplica: number;
  /** Micro-units per GPU-hour, captured when the interval opens: a price change never rewrites it. */
  ratePerGpuHour: bigint;
}

export interface MeterState extends GpuShape {
  replicas: number;
  /** Start of the open interval; null when nothing runs. */
  openedAt: Date | null;
  lastObservedAt: Date;
  terminatedAt: Date | null;
}

export interface Observation extends GpuShape {
  /** Replicas holding GPUs now: scheduled on a node (or started, locally) and not yet gone. */
  replicas: number;
  /** When this was observed. */
  at: Date;
  /**
   * When the observed state began, if the runtime knows (a pod's scheduling or deletion time), or
   * `lastObserved` when it cannot know and the meter's last observation is the fairest guess (a
   * replica found gone after the API was down). Default: `at`.
   */
  since?: Date | 'lastObserved';
}

export interface ClosedInterval extends GpuShape {
  replicas: number;
  startedAt: Date;
  endedAt: Date;
}

export interface MeterStep {
  /** The interval this observation closes, if any. */
  close?: ClosedInterval;
  /** The meter after it (null: leave it as it was). */
  next: MeterState | null;
}

const later = (a: Date, b: Date | null | undefined) => (b && b > a ? b : a);

function sameShape(a: GpuShape, b: GpuShape): boolean {
  return (
    a.accountId === b.accountId &&
    a.instanceType === b.instanceType &&
    a.gpuType === b.gpuType &&
    a.gpusPerReplica === b.gpusPerReplica &&
    a.ratePerGpuHour === b.ratePerGpuHour
  );
}

/**
 * Level-triggered: the observation says what runs now, whatever was missed. The same state again
 * only moves `lastObservedAt`; a different one closes the open interval and opens the next at the
 * change time — `since`, kept between the last observation and `at`, and never before `floor`
 * (time already invoiced is final). A terminated meter and observations older than the last one
 * change nothing, so replays are harmless.
 */
export function meterStep(current: MeterState | null, obs: Observation, floor: Date | null): MeterStep {
  if (current?.terminatedAt) return { next: null };
  if (current && obs.at < current.lastObservedAt) return { next: null };
  const at = later(obs.at, floor);
  const requested = obs.since === 'lastObserved' ? (current?.lastObservedAt ?? at) : (obs.since ?? obs.at);
  let change = later(later(requested, current?.lastObservedAt), floor);
  if (change > at) change = at;

  const shape: GpuShape = {
    accountId: obs.accountId,
    instanceType: obs.instanceType,
    gpuType: obs.gpuType,
    gpusPerReplica: obs.gpusPerReplica,
    ratePerGpuHour: obs.ratePerGpuHour,
  };
  const unchanged =
    current && current.replicas === obs.replicas && (obs.replicas === 0 || sameShape(current, shape));
  if (unchanged) return { next: { ...current, lastObservedAt: at } };

  const next: MeterState = {
    ...shape,
    replicas: obs.replicas,
    openedAt: obs.replicas > 0 ? change : null,
    lastObservedAt: at,
    terminatedAt: null,
  };
  const close = current ? closeAt(current, change) : undefined;
  return close ? { close, next } : { next };
}

/** Termination closes the open interval at `at` (kept after the last observation) for good. */
export function terminateStep(current: MeterState | null, at: Date, floor: Date | null): MeterStep {
  if (!current || current.terminatedAt) return { next: null };
  const end = later(later(at, current.lastObservedAt), floor);
  const next = { ...current, replicas: 0, openedAt: null, lastObservedAt: end, terminatedAt: end };
  const close = closeAt(current, end);
  return close ? { close, next } : { next };
}

/** The meter's open interval closed at `end`; nothing if nothing runs or it would be empty. */
export function closeAt(m: MeterState, end: Date): ClosedInterval | undefined {
  if (!m.openedAt || m.replicas <= 0 || end <= m.openedAt) return undefined;
  return {
    accountId: m.accountId,
    instanceType: m.instanceType,
    gpuType: m.gpuType,
    gpusPerReplica: m.gpusPerReplica,
    ratePerGpuHour: m.ratePerGpuHour,
    replicas: m.replicas,
    startedAt: m.openedAt,
    endedAt: end,
  };
}

// ── Weeks and invoice lines ──────────────────────────────────────────────────────────────────────

const DAY_MS = 86_400_000;
export const WEEK_MS = 7 * DAY_MS;

/** Monday 00:00 UTC on or before `t`. */
export function weekStart(t: Date): Date {
  const day = Math.floor(t.getTime() / DAY_MS);
  // 1970-01-01 was a Thursday: days since the epoch + 3, mod 7, is days since Monday.
  const sinceMonday = (((day + 3) % 7) + 7) % 7;
  return new Date((day - sinceMonday) * DAY_MS);
}

export interface InvoiceLine {
  endpointId: string;
  instanceType: string;
  gpuType: string;
  gpusPerReplica: number;
  /** Replicas × GPUs × milliseconds. */
  gpuMs: bigint;
  ratePerGpuHour: bigint;
  amount: bigint;
}

/**
 * The lines of one period from intervals that may reach outside it (only the overlap counts): one
 * per endpoint, or several if its GPU count or rate changed within the period. Amounts are
 * rounded once per line.
 */
export function invoiceLines(
  intervals: (ClosedInterval & { endpointId: string })[],
  periodStart: Date,
  periodEnd: Date,
): InvoiceLine[] {
  const lines = new Map<string, InvoiceLine>();
  for (const i of intervals) {
    const from = Math.max(i.startedAt.getTime(), periodStart.getTime());
    const to = Math.min(i.endedAt.getTime(), periodEnd.getTime());
    if (to <= from) continue;
    const gpuMs = BigInt(to - from) * BigInt(i.replicas) * BigInt(i.gpusPerReplica);
    const key = [i.endpointId, i.instanceType, i.gpuType, i.gpusPerReplica, i.ratePerGpuHour].join('\u0000');
    const line = lines.get(key);
    if (line) line.gpuMs += gpuMs;
    else
      lines.set(key, {
        endpointId: i.endpointId,
        instanceType: i.instanceType,
        gpuType: i.gpuType,
        gpusPerReplica: i.gpusPerReplica,
        gpuMs,
        ratePerGpuHour: i.ratePerGpuHour,
        amount: 0n,
      });
  }
  return [...lines.values()]
    .map((l) => ({ ...l, amount: gpuTimeAmount(l.gpuMs, l.ratePerGpuHour) }))
    .sort(
      (a, b) =>
        a.endpointId.localeCompare(b.endpointId) ||
        a.gpusPerReplica - b.gpusPerReplica ||
        (a.ratePerGpuHour < b.ratePerGpuHour ? -1 : a.ratePerGpuHour > b.ratePerGpuHour ? 1 : 0),
    );
}
