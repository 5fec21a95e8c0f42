import type { DedicatedEndpointStatus, WakeReceipt, WarmNode } from '@berth/crds';
import { MAX_WARM_NODES } from '@berth/crds';
import type { Decision, ReplicaStart } from './types.ts';

// Where a wake lands, and the receipt of how it went. Pure: the reconcile pass hands in what it
// observed and decided, and writes what comes back into the status.
//
// - status.warmNodes: the nodes where replicas ran, most recent first (their disks and page caches
//   hold the weights; vLLM's compile caches too, on the node's cache volume).
// - status.preferredNodes: the warm nodes as the endpoint hibernated. The engine pods prefer them
//   (preferred node affinity, weighted by recency: never required, so a replica that does not fit
//   there goes elsewhere at once). Frozen while replicas run: the pod template changes only while
//   the endpoint is scaled to zero, so a preference never rolls running pods.
// - status.lastWake: the wake signal, the scale written, and the woken replica's scheduling, image
//   and engine readiness, with its node and whether that node was a preferred one; then the first
//   byte of a held call's answer, which the API reports in an annotation.

/** The observed Ready nodes merged into the known ones: newest first, each node once, at most MAX_WARM_NODES. */
export function warmNodes(
  seen: readonly WarmNode[] | undefined,
  known: readonly WarmNode[] | undefined,
): WarmNode[] | undefined {
  const byName = new Map<string, string>();
  for (const n of [...(known ?? []), ...(seen ?? [])]) {
    const at = byName.get(n.name);
    if (!at || n.readyAt > at) byName.set(n.name, n.readyAt);
  }
  const list = [...byName]
    .map(([name, readyAt]) => ({ name, readyAt }))
    .sort((a, b) => (a.readyAt < b.readyAt ? 1 : a.readyAt > b.readyAt ? -1 : a.name < b.name ? -1 : 1))
    .slice(0, MAX_WARM_NODES);
  return list.length ? list : undefined;
}

/** The nodes a wake prefers: fixed while the endpoint is hibernated, kept as they were otherwise. */
export function preferredNodes(
  phase: Decision['phase'],
  warm: readonly WarmNode[] | undefined,
  previous: readonly string[] | undefined,
): string[] | undefined {
  if (phase !== 'hibernated') return previous ? [...previous] : undefined;
  return warm?.length ? warm.map((n) => n.name) : undefined;
}

/** Slack between the operator's clock and the API server's timestamps of the pod it created. */
const CLOCK_SLACK_MS = 2_000;

/**
 * The receipt of the wake in progress or just completed: `wakeStartedAt` is when the operator
 * wrote the replica count (decision memory while waking; the previous status on the pass that
 * completes it). Unchanged once complete, until the next wake, but for `firstByte` (the API's
 * wake-first-byte annotation), taken once the engine is Ready when it is not older than the wake.
 */
export function wakeReceipt(
  prev: DedicatedEndpointStatus,
  d: Decision,
  starts: readonly ReplicaStart[] | undefined,
  firstByte?: string,
): WakeReceipt | undefined {
  const r = receiptOf(prev, d, starts);
  if (!r?.engineReadyAt || r.firstByteAt || !firstByte) return r;
  const at = Date.parse(firstByte);
  return at >= Date.parse(r.scaledAt) ? { ...r, firstByteAt: new Date(at).toISOString() } : r;
}

function receiptOf(
  prev: DedicatedEndpointStatus,
  d: Decision,
  starts: readonly ReplicaStart[] | undefined,
): WakeReceipt | undefined {
  // The pass that ends a wake can see the Deployment's ready replica before the pod cache has the
  // pod's Ready condition (two watches): an incomplete receipt is completed on the passes after it,
  // while the endpoint stays up.
  const unfinished =
    d.phase === 'up' && prev.lastWake && !prev.lastWake.engineReadyAt ? prev.lastWake : undefined;
  const scaledAt =
    d.memory.wakeStartedAt ??
    (d.wakeDurationSeconds !== undefined ? prev.wakeStartedAt : undefined) ??
    unfinished?.scaledAt;
  if (!scaledAt) return prev.lastWake;
  if (prev.lastWake?.scaledAt === scaledAt && prev.lastWake.engineReadyAt) return prev.lastWake;
  const signal = d.memory.wakeRequestSeen ?? prev.wakeRequestSeen ?? unfinished?.requestedAt;
  const requestedAt = signal && !Number.isNaN(Date.parse(signal)) && signal <= scaledAt ? signal : undefined;
  const after = new Date(Date.parse(scaledAt) - CLOCK_SLACK_MS).toISOString();
  // The replica this wake started: the first pod created after the scale was written.
  const pod = [...(starts ?? [])]
    .filter((s) => s.createdAt >= after)
    .sort((a, b) => (a.createdAt < b.createdAt ? -1 : 1))[0];
  const receipt: WakeReceipt = { scaledAt };
  if (requestedAt) receipt.requestedAt = requestedAt;
  if (pod) {
    receipt.pod = pod.pod;
    if (pod.scheduledAt) receipt.scheduledAt = pod.scheduledAt;
    if (pod.runningAt) receipt.imageReadyAt = pod.runningAt;
    if (pod.readyAt) receipt.engineReadyAt = pod.readyAt;
    if (pod.node) {
      receipt.node = pod.node;
      receipt.placement = prev.preferredNodes?.includes(pod.node) ? 'warm' : 'cold';
    }
  }
  return receipt;
}

/** The stages of a complete receipt in seconds (a metric per stage). */
export function wakeStages(
  r: WakeReceipt,
): Partial<Record<'signal' | 'scheduled' | 'image' | 'engine' | 'total', number>> {
  const t = (v: string | undefined) => (v ? Date.parse(v) : NaN);
  const s = (a: number, b: number) =>
    Number.isNaN(a) || Number.isNaN(b) ? undefined : Math.max(0, b - a) / 1000;
  const out: Partial<Record<'signal' | 'scheduled' | 'image' | 'engine' | 'total', number>> = {};
  const put = (k: keyof typeof out, v: number | undefined) => {
    if (v !== undefined) out[k] = v;
  };
  put('signal', s(t(r.requestedAt), t(r.scaledAt)));
  put('scheduled', s(t(r.scaledAt), t(r.scheduledAt)));
  put('image', s(t(r.scheduledAt), t(r.imageReadyAt)));
  put('engine', s(t(r.imageReadyAt), t(r.engineReadyAt)));
  put('total', s(t(r.requestedAt ?? r.scaledAt), t(r.engineReadyAt)));
  return out;
}
