import type { V1Deployment, V1Pod } from '@kubernetes/client-node';
import type { ObservedWorkload, WorkloadFailure } from '../core/types.ts';

// Pure translation of pod and Deployment status into the runtime-agnostic observation.

const OOM_LOG =
  /CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError|not enough (GPU )?memory|No available memory for the cache blocks/i;
const PULL_REASONS = new Set(['ImagePullBackOff', 'InvalidImageName', 'ErrImageNeverPull']);

export interface ClassifyOptions {
  /** CrashLoopBackOff with at least this many restarts is a failure, not a hiccup. */
  crashLoopRestarts: number;
}

/** The most severe failure signal among the pods, most severe first: pull > OOM > crash loop > unschedulable. */
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
      if (last && (last.reason === 'OOMKilled' || OOM_LOG.test(last.message ?? ''))) {
        found.push({
          kind: 'OutOfMemory',
          message: `The engine ran out of memory loading the model (pod ${name}: ${tail(last.message) || last.reason}). Choose a larger GPU type, more GPUs, or a smaller maxModelLen.`,
        });
      }
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
  const order: WorkloadFailure['kind'][] = ['ImagePull', 'OutOfMemory', 'CrashLoop', 'Unschedulable'];
  found.sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind));
  return found[0];
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
  return {
    replicas: deployment?.status?.replicas ?? 0,
    // Pods are the fresher signal (the Deployment status lags by a controller pass); take either.
    readyReplicas: Math.max(deployment?.status?.readyReplicas ?? 0, readyPods),
    ...(failure ? { failure } : {}),
  };
}

function tail(message: string | undefined, max = 600): string {
  if (!message) return '';
  const m = message.trim();
  return m.length > max ? `…${m.slice(-max)}` : m;
}
