import type { DedicatedEndpoint, FailureReason, Phase } from '@berth/crds';
import { ANNOTATION_LAST_ACTIVITY, ANNOTATION_WAKE_REQUESTED } from '@berth/crds';
import { conditionsFor } from './conditions.ts';
import type {
  Decision,
  Deadlines,
  Memory,
  Observed,
  PhaseEvent,
  ScalingPolicy,
  WorkloadFailureKind,
} from './types.ts';

// The phase machine: one pure function from (endpoint, observed, now) to a decision. The phase is
// derived from the facts kept in Memory (failure, hibernatedAt, wakeStartedAt, ...) and from what was
// observed; the previous status.phase is only compared to decide whether to emit a transition event.

export interface PhaseOptions {
  deadlines: Deadlines;
  scaling: ScalingPolicy;
}

const FAILURE_FROM_WORKLOAD: Record<Exclude<WorkloadFailureKind, 'Unschedulable'>, FailureReason> = {
  ImagePull: 'ImagePullFailed',
  CrashLoop: 'CrashLoop',
  OutOfMemory: 'ModelTooLarge',
  GatedModel: 'GatedModelNoToken',
};

const POLL_MS = 30_000;
/** The pass after the one that starts a wake, at the latest (sooner on any change it watches). */
const WAKE_RECHECK_MS = 1_000;

function iso(d: Date): string {
  return d.toISOString();
}

function parseTime(v: string | undefined): Date | undefined {
  if (!v) return undefined;
  const t = new Date(v);
  return Number.isNaN(t.getTime()) ? undefined : t;
}

function elapsedMs(since: string | undefined, now: Date): number {
  const t = parseTime(since);
  return t ? now.getTime() - t.getTime() : 0;
}

export function decide(
  endpoint: DedicatedEndpoint,
  observed: Observed,
  now: Date,
  opts: PhaseOptions,
): Decision {
  const generation = endpoint.metadata.generation ?? 0;
  const status = endpoint.status ?? {};
  const spec = endpoint.spec;
  const annotations = endpoint.metadata.annotations ?? {};
  const minReplicas = spec.scaling.minReplicas;
  const maxReplicas = spec.scaling.maxReplicas;
  const m: Memory = {
    buildingSince: status.buildingSince,
    upSince: status.upSince,
    hibernatedAt: status.hibernatedAt,
    wakeStartedAt: status.wakeStartedAt,
    wakeRequestSeen: status.wakeRequestSeen,
    failure: status.failure,
    preflightGeneration: status.preflightGeneration,
  };
  const extraEvents: PhaseEvent[] = [];
  let wakeDurationSeconds: number | undefined;
  const running = Math.max(1, minReplicas);

  const result = (
    phase: Phase,
    reason: string,
    message: string,
    desiredReplicas: number,
    requeueAfterMs?: number,
  ): Decision => {
    const changed = phase !== status.phase || reason !== status.reason;
    const events: PhaseEvent[] = [...extraEvents];
    if (changed) events.push({ type: phase === 'failed' ? 'Warning' : 'Normal', reason, message });
    return {
      phase,
      reason,
      message,
      desiredReplicas,
      requeueAfterMs: requeueAfterMs === undefined ? undefined : Math.max(1000, Math.ceil(requeueAfterMs)),
      memory: m,
      events,
      conditions: conditionsFor(phase, reason, message),
      wakeDurationSeconds,
    };
  };

  const fail = (reason: FailureReason, message: string): Decision => {
    m.failure = { reason, message, generation, at: iso(now) };
    m.buildingSince = undefined;
    m.wakeStartedAt = undefined;
    m.upSince = undefined;
    m.hibernatedAt = undefined;
    return result('failed', reason, message, 0);
  };

  // A new generation after a failure builds again; a failure of this generation is final.
  if (m.failure && m.failure.generation !== generation) {
    m.failure = undefined;
    m.buildingSince = iso(now);
    m.preflightGeneration = undefined;
    extraEvents.push({
      type: 'Normal',
      reason: 'SpecChanged',
      message: `Generation ${generation} supersedes the failure; building again`,
    });
  }
  if (m.failure) return result('failed', m.failure.reason, m.failure.message, 0);

  if (!observed.hardware.ok) return fail('UnknownInstanceType', observed.hardware.message);

  const pf = observed.preflight;
  if (pf?.kind === 'failed') return fail(pf.reason, pf.message);
  if (pf?.kind === 'passed') m.preflightGeneration = generation;
  if (m.preflightGeneration === undefined) {
    // Never passed the checks: do not provision GPUs yet.
    m.buildingSince ??= iso(now);
    const left = opts.deadlines.provisioningSeconds * 1000 - elapsedMs(m.buildingSince, now);
    if (left <= 0)
      return fail(
        'ProvisioningTimeout',
        `Model checks did not complete within ${opts.deadlines.provisioningSeconds}s: ${pf?.message ?? 'model hub not reachable'}`,
      );
    if (pf?.kind === 'unavailable') {
      const hubLeft = opts.deadlines.hubUnreachableSeconds * 1000 - elapsedMs(m.buildingSince, now);
      if (hubLeft <= 0)
        return fail(
          'ModelSourceUnreachable',
          `The model hub did not answer the pre-start checks for ${opts.deadlines.hubUnreachableSeconds}s (${pf.message}). ` +
            'Point HF_ENDPOINT at a hub or mirror the cluster can reach, give pre-downloaded weights in spec.model.source ' +
            '(pvc://, file://, s3:// or oci://), or set BERTH_PREFLIGHT=false to start without the checks; then update the endpoint spec to retry.',
        );
      return result(
        'building',
        'CheckingModel',
        `Waiting for the model hub: ${pf.message}`,
        0,
        Math.min(left, hubLeft, 10_000),
      );
    }
    return result('building', 'CheckingModel', 'Checking the model and hub token', 0, Math.min(left, 10_000));
  }

  const wl = observed.workload;
  const wakeRequested = annotations[ANNOTATION_WAKE_REQUESTED];

  // A wake that starts in this pass does not end in it: what this pass observed predates the replica
  // count it writes (a replica of the hibernation just before, Ready until its deletion is seen, or
  // a Deployment status not yet updated for it), and the wake is written down before it can end.
  let wakeStartsNow = false;
  if (m.hibernatedAt) {
    const newWake = wakeRequested !== undefined && wakeRequested !== m.wakeRequestSeen;
    if (newWake || minReplicas > 0) {
      m.hibernatedAt = undefined;
      m.wakeRequestSeen = wakeRequested;
      m.wakeStartedAt = iso(now);
      wakeStartsNow = true;
    } else {
      return result(
        'hibernated',
        'IdleTimeout',
        `No traffic for ${spec.scaling.idleTimeoutSeconds}s; scaled to zero. The next request wakes it.`,
        0,
      );
    }
  }

  const workloadFailure =
    wl.failure && wl.failure.kind !== 'Unschedulable' ? { ...wl.failure, kind: wl.failure.kind } : undefined;

  if (m.wakeStartedAt) {
    if (wl.readyReplicas > 0 && !wakeStartsNow) {
      wakeDurationSeconds = elapsedMs(m.wakeStartedAt, now) / 1000;
      m.wakeStartedAt = undefined;
      m.upSince = iso(now);
      m.buildingSince = undefined;
      // falls through to the `up` branch below
    } else {
      if (workloadFailure) return fail(FAILURE_FROM_WORKLOAD[workloadFailure.kind], workloadFailure.message);
      const left = opts.deadlines.wakeSeconds * 1000 - elapsedMs(m.wakeStartedAt, now);
      if (left <= 0) {
        const why = wl.failure ? ` Last problem: ${wl.failure.message}` : '';
        return fail(
          'WakeTimeout',
          `No replica became ready within ${opts.deadlines.wakeSeconds}s of the wake request.${why}`,
        );
      }
      return result(
        'waking',
        'WakeRequested',
        'A request reached the hibernated endpoint; starting a replica',
        running,
        Math.min(left, wakeStartsNow ? WAKE_RECHECK_MS : POLL_MS),
      );
    }
  }

  if (wl.readyReplicas > 0) {
    m.upSince ??= iso(now);
    m.buildingSince = undefined;
    const desired = replicasForLoad(wl.inFlight, minReplicas, maxReplicas, opts.scaling);
    if (minReplicas === 0 && !(wl.inFlight && wl.inFlight > 0)) {
      const lastActivity = latest(parseTime(annotations[ANNOTATION_LAST_ACTIVITY]), parseTime(m.upSince));
      const idleMs = lastActivity ? now.getTime() - lastActivity.getTime() : 0;
      const left = spec.scaling.idleTimeoutSeconds * 1000 - idleMs;
      if (left <= 0) {
        m.hibernatedAt = iso(now);
        m.upSince = undefined;
        m.wakeRequestSeen = wakeRequested; // a wake request older than this hibernation is already served
        return result(
          'hibernated',
          'IdleTimeout',
          `No traffic for ${spec.scaling.idleTimeoutSeconds}s; scaled to zero. The next request wakes it.`,
          0,
        );
      }
      return result('up', 'ReplicaReady', readyMessage(wl.readyReplicas), desired, left);
    }
    return result('up', 'ReplicaReady', readyMessage(wl.readyReplicas), desired);
  }

  // Not ready: building (first start, or every replica lost readiness).
  m.upSince = undefined;
  if (workloadFailure) return fail(FAILURE_FROM_WORKLOAD[workloadFailure.kind], workloadFailure.message);
  m.buildingSince ??= iso(now);
  const left = opts.deadlines.provisioningSeconds * 1000 - elapsedMs(m.buildingSince, now);
  if (left <= 0) {
    const why = wl.failure ? ` Last problem: ${wl.failure.message}` : '';
    return fail(
      'ProvisioningTimeout',
      `No replica became ready within ${opts.deadlines.provisioningSeconds}s.${why}`,
    );
  }
  if (wl.failure?.kind === 'Unschedulable')
    return result('building', 'Unschedulable', wl.failure.message, running, Math.min(left, POLL_MS));
  return result(
    'building',
    'Provisioning',
    'Starting the engine and loading model weights',
    running,
    Math.min(left, POLL_MS),
  );
}

/** Replicas to run while up: enough for the in-flight load, within [max(1, min), max]. */
export function replicasForLoad(
  inFlight: number | undefined,
  min: number,
  max: number,
  policy: ScalingPolicy,
): number {
  const floor = Math.max(1, min);
  if (inFlight === undefined) return Math.min(floor, max);
  const wanted = Math.ceil(inFlight / policy.targetInFlightPerReplica);
  return Math.min(max, Math.max(floor, wanted));
}

function latest(a: Date | undefined, b: Date | undefined): Date | undefined {
  if (!a) return b;
  if (!b) return a;
  return a > b ? a : b;
}

function readyMessage(n: number): string {
  return `${n} replica${n === 1 ? '' : 's'} ready`;
}

/**
 * A sleeping endpoint with a wake request it has not acted on (the condition the phase machine wakes
 * on): its key goes first in the work queue.
 */
export function wakePending(ep: Pick<DedicatedEndpoint, 'metadata' | 'status'> | undefined): boolean {
  const requested = ep?.metadata.annotations?.[ANNOTATION_WAKE_REQUESTED];
  return !!ep?.status?.hibernatedAt && requested !== undefined && requested !== ep.status.wakeRequestSeen;
}
