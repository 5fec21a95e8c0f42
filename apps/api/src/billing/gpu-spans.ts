// Replaying what ran from replica spans. A runtime knows each replica's life as a span (scheduled →
// gone); the meter in the database knows how far it has been told (`lastObservedAt`). `replay` turns
// the spans into the observations the meter has not had yet, in order, so a missed watch event, an
// API restart or a hand-over between API replicas neither loses nor double-counts an interval: an
// observation the meter already had is older than its last one and changes nothing (gpu-time.ts).

/** One replica holding GPUs from `start` until `end` (absent: still running). */
export interface ReplicaSpan {
  start: Date;
  end?: Date;
}

/** What the meter must be told, in this order: `replicas` held GPUs from `at` on. */
export interface ReplayStep {
  replicas: number;
  at: Date;
}

/** Spans covering `t` (start inclusive, end exclusive). */
export function replicasAt(spans: readonly ReplicaSpan[], t: Date): number {
  let n = 0;
  for (const s of spans) if (s.start <= t && (!s.end || s.end > t)) n++;
  return n;
}

/**
 * The observations that bring a meter that last heard of `meter.replicas` at `meter.lastObservedAt`
 * up to `now`: first, if the spans disagree with the meter at its last observation (a replica gone
 * while nobody watched, whose end nobody saw), the state the spans show from that instant — the
 * fairest guess, as the meter was told nothing later; then one step per change after it; then `now`,
 * which only moves the meter's last observation when nothing changed (a heartbeat that bounds what an
 * unseen end can cost). Nothing for an endpoint that never ran and has no meter.
 *
 * The meter's last observation is trusted: if it counted N replicas then, the N oldest spans still
 * running after it are those replicas, even if their start, as known now, is later (a start taken
 * from the cluster's clock, after a restart, may be skewed from the meter's).
 */
export function replay(
  meter: { replicas: number; lastObservedAt: Date } | null,
  spans: readonly ReplicaSpan[],
  now: Date,
): ReplayStep[] {
  if (!meter && spans.length === 0) return [];
  const from = meter?.lastObservedAt;
  if (from && from > now) return [];
  if (from && meter.replicas > 0) {
    const counted = spans
      .filter((s) => !s.end || s.end > from)
      .sort((a, b) => a.start.getTime() - b.start.getTime())
      .slice(0, meter.replicas);
    spans = spans.map((s) => (counted.includes(s) && s.start > from ? { ...s, start: from } : s));
  }
  const steps: ReplayStep[] = [];
  let current = meter?.replicas ?? 0;
  if (from) {
    const there = replicasAt(spans, from);
    if (there !== current) steps.push({ replicas: there, at: from });
    current = there;
  }
  const changes = new Set<number>();
  for (const s of spans)
    for (const t of [s.start, s.end]) if (t && (!from || t > from) && t <= now) changes.add(t.getTime());
  for (const t of [...changes].sort((a, b) => a - b)) {
    const at = new Date(t);
    const n = replicasAt(spans, at);
    if (n === current) continue;
    steps.push({ replicas: n, at });
    current = n;
  }
  const last = steps.at(-1);
  if (!last || last.at < now) steps.push({ replicas: replicasAt(spans, now), at: now });
  return steps;
}
