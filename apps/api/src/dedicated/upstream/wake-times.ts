// How long an endpoint takes to wake, from its recent wakes: what a 503 for a waking endpoint puts in
// Retry-After instead of a fixed guess. Two sources, one sample per wake (keyed by its wake signal):
// this API's own observation (from the wake signal to the first Ready replica it saw), and the
// operator's receipt in status.lastWake (signal → engine Ready) for wakes another API replica saw,
// or that happened before this process started.
import type { DedicatedEndpoint } from '@berth/crds';
import { receiptSeconds, wakeProgress } from '../wake-receipt.ts';

/** Wakes per endpoint the estimate is made of (the most recent). */
export const WAKE_SAMPLES = 20;
/** The most endpoints whose wakes are kept (least recently woken dropped first). */
const MAX_ENDPOINTS = 10_000;

export interface WakeTimes {
  /** One wake of the endpoint took `seconds`; `key` names the wake (its signal) so it counts once. */
  observe(id: string, key: string, seconds: number): void;
  /** The p95 of the endpoint's recent wakes in seconds (its receipt in status counted), or undefined. */
  p95(endpoint: DedicatedEndpoint): number | undefined;
  /**
   * Seconds a caller refused while the endpoint wakes should wait (Retry-After): what is left of the
   * p95 wake (else the default) since this wake's signal, and never less than a tenth of it or 1 s.
   */
  retryAfter(endpoint: DedicatedEndpoint, now?: number): number;
}

export function wakeTimes(defaultSeconds: number): WakeTimes {
  const byId = new Map<string, { keys: string[]; seconds: number[] }>();

  const observe = (id: string, key: string, seconds: number) => {
    let e = byId.get(id);
    if (e?.keys.includes(key)) return;
    if (!e) {
      if (byId.size >= MAX_ENDPOINTS) byId.delete(byId.keys().next().value!);
      e = { keys: [], seconds: [] };
    }
    byId.delete(id);
    byId.set(id, e); // most recently woken last
    e.keys.push(key);
    e.seconds.push(seconds);
    if (e.keys.length > WAKE_SAMPLES) {
      e.keys.shift();
      e.seconds.shift();
    }
  };

  const p95 = (endpoint: DedicatedEndpoint) => {
    const id = endpoint.metadata.name;
    const receipt = receiptSeconds(endpoint.status?.lastWake);
    if (receipt) observe(id, receipt.key, receipt.seconds);
    const samples = byId.get(id)?.seconds;
    if (!samples?.length) return undefined;
    const sorted = [...samples].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.ceil(0.95 * sorted.length) - 1)];
  };

  return {
    observe,
    p95,
    retryAfter(endpoint, now = Date.now()) {
      const typical = p95(endpoint) ?? defaultSeconds;
      const started = wakeProgress(endpoint)?.startedAt;
      const left = started === undefined ? typical : typical - (now - started) / 1000;
      return Math.max(1, Math.ceil(typical / 10), Math.ceil(left));
    },
  };
}
