import type { StartTiming } from '@berth/crds';
import type { V1Deployment, V1Pod } from '@kubernetes/client-node';
import { failureInOutput, mostSevere, outOfMemory } from '../core/failures.ts';
import type { ObservedWorkload, ReplicaStart, WorkloadFailure } from '../core/types.ts';

// Pure translation of pod and Deployment status into the runtime-agnostic observation.

/** How a user gives a Kubernetes endpoint's engine a hub token. */
export const HUB_TOKEN_REMEDY =
  'Create the endpoint again with a hubToken that has access to the model (or fix the Secret named in spec.model.hubTokenSecretRef).';
const PULL_REASONS = new Set(['ImagePullBackOff', 'InvalidImageName', 'ErrImageNeverPull']);

export interface ClassifyOptions {
  /** CrashLoopBackOff with at least this many restarts is a failure, not a hiccup. */
  crashLoopRestarts: number;
}

/** The most severe failure signal among the pods (core/failures.ts orders them). */
export function classifyPods(pods: readonly V1Pod[], opts: ClassifyOptions): WorkloadFailure | undefined {
  const found: WorkloadFailure[] = [];
  for (const pod of pods) {
    if (pod.metadata?.deletionTimestamp) continue;
    const name = pod.metadata?.name ?? '?';
    for (const cs of pod.status?.containerStatuses ?? []) {
      const waiting = cs.state?.waiting;
      const last = cs.lastState?.terminated ?? cs.state?.terminated;
      if (waiting?.reason && PULL_REASONS.has(waiting.reason)) {
        found.push({
          kind: 'ImagePull',
          message: `Cannot pull image ${cs.image}: ${waiting.message ?? waiting.reason}. Check engine.image and registry access.`,
        });
      }
      // The termination message is the log's tail (FallbackToLogsOnError): it names OOM or a gated repo.
      const fatal =
        last?.reason === 'OOMKilled'
          ? outOfMemory(`pod ${name}`, 'OOMKilled')
          : last?.message
            ? failureInOutput(last.message, { where: `pod ${name}`, hubTokenRemedy: HUB_TOKEN_REMEDY })
            : undefined;
      if (fatal) found.push(fatal);
      if (waiting?.reason === 'CrashLoopBackOff' && (cs.restartCount ?? 0) >= opts.crashLoopRestarts) {
        const why = last
          ? `exit code ${last.exitCode}${last.message ? `: ${tail(last.message)}` : ''}`
          : (waiting.message ?? '');
        found.push({
          kind: 'CrashLoop',
          message: `The engine container keeps crashing (pod ${name}, ${cs.restartCount} restarts, ${why}).`,
        });
      }
    }
    const sched = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
    if (sched?.status === 'False' && sched.reason === 'Unschedulable') {
      found.push({
        kind: 'Unschedulable',
        message: `No node can run the engine yet: ${sched.message ?? 'unschedulable'}`,
      });
    }
  }
  return mostSevere(found);
}

export function observeWorkload(
  deployment: V1Deployment | undefined,
  pods: readonly V1Pod[],
  opts: ClassifyOptions,
): ObservedWorkload {
  const failure = classifyPods(pods, opts);
  const readyPods = pods.filter(
    (p) =>
      !p.metadata?.deletionTimestamp &&
      p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
  ).length;
  const lastStart = startTiming(pods);
  const starts = replicaStarts(pods);
  const nodes = starts.flatMap((r) => (r.node && r.readyAt ? [{ name: r.node, readyAt: r.readyAt }] : []));
  return {
    ...(lastStart ? { lastStart } : {}),
    ...(starts.length ? { starts } : {}),
    ...(nodes.length ? { nodes } : {}),
    replicas: deployment?.status?.replicas ?? 0,
    // Pods are the fresher signal (the Deployment status lags by a controller pass); take either.
    readyReplicas: Math.max(deployment?.status?.readyReplicas ?? 0, readyPods),
    ...(failure ? { failure } : {}),
  };
}

/**
 * The newest Ready pod's start: created → scheduled (PodScheduled) → engine container running (the
 * image is on the node) → Ready (the startup probe passed: weights loaded and the engine serving).
 */
export function startTiming(pods: readonly V1Pod[]): StartTiming | undefined {
  const t = (v: Date | string | undefined) => (v === undefined ? NaN : new Date(v).getTime());
  let best: StartTiming | undefined;
  let bestCreated = -Infinity;
  for (const pod of pods) {
    if (pod.metadata?.deletionTimestamp) continue;
    const cond = (type: string) =>
      pod.status?.conditions?.find((c) => c.type === type && c.status === 'True');
    const created = t(pod.metadata?.creationTimestamp);
    const scheduled = t(cond('PodScheduled')?.lastTransitionTime);
    const running = t(
      pod.status?.containerStatuses?.find((c) => c.name === 'engine')?.state?.running?.startedAt,
    );
    const ready = t(cond('Ready')?.lastTransitionTime);
    if ([created, scheduled, running, ready].some(Number.isNaN) || created <= bestCreated) continue;
    const s = (a: number, b: number) => Math.max(0, b - a) / 1000;
    bestCreated = created;
    best = {
      pod: pod.metadata!.name!,
      createdAt: new Date(created).toISOString(),
      scheduledSeconds: s(created, scheduled),
      imageReadySeconds: s(scheduled, running),
      engineReadySeconds: s(running, ready),
      totalSeconds: s(created, ready),
    };
  }
  return best;
}

/** Each live pod's start so far: node, created, scheduled, engine running, Ready (kubelet times). */
export function replicaStarts(pods: readonly V1Pod[]): ReplicaStart[] {
  const iso = (v: Date | string | undefined) => (v === undefined ? undefined : new Date(v).toISOString());
  const out: ReplicaStart[] = [];
  for (const pod of pods) {
    if (pod.metadata?.deletionTimestamp || !pod.metadata?.name || !pod.metadata.creationTimestamp) continue;
    const cond = (type: string) =>
      pod.status?.conditions?.find((c) => c.type === type && c.status === 'True')?.lastTransitionTime;
    const running = pod.status?.containerStatuses?.find((c) => c.name === 'engine')?.state?.running
      ?.startedAt;
    const start: ReplicaStart = { pod: pod.metadata.name, createdAt: iso(pod.metadata.creationTimestamp)! };
    if (pod.spec?.nodeName) start.node = pod.spec.nodeName;
    const scheduledAt = iso(cond('PodScheduled'));
    if (scheduledAt) start.scheduledAt = scheduledAt;
    const runningAt = iso(running);
    if (runningAt) start.runningAt = runningAt;
    const readyAt = iso(cond('Ready'));
    if (readyAt) start.readyAt = readyAt;
    out.push(start);
  }
  return out;
}

function tail(message: string | undefined, max = 600): string {
  if (!message) return '';
  const m = message.trim();
  return m.length > max ? `…${m.slice(-max)}` : m;
}
