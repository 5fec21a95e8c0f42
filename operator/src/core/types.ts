import type {
  DedicatedEndpoint,
  DedicatedEndpointStatus,
  FailureReason,
  Phase,
  StartTiming,
  WarmNode,
} from '@berth/crds';
import type { PhaseCondition } from './conditions.ts';

// The runtime-agnostic seam. The Kubernetes runtime (k8s/) implements it with informers and
// server-side apply, the local runtime (local/) with processes and the API's database. Nothing in
// core/ imports @kubernetes/client-node.

/** Memory the phase machine keeps between passes (a subset of status). */
export type Memory = Pick<
  DedicatedEndpointStatus,
  | 'buildingSince'
  | 'upSince'
  | 'hibernatedAt'
  | 'wakeStartedAt'
  | 'wakeRequestSeen'
  | 'failure'
  | 'preflightGeneration'
>;

/** Result of the pre-provisioning checks (model exists, fits the hardware, token grants access). */
export type PreflightResult =
  | { kind: 'passed'; message?: string }
  | { kind: 'failed'; reason: FailureReason; message: string }
  /** The hub could not be asked (network, 5xx); retry, do not fail the endpoint. */
  | { kind: 'unavailable'; message: string };

export type WorkloadFailureKind =
  | 'ImagePull'
  | 'CrashLoop'
  | 'OutOfMemory'
  /** The engine could not download a gated or private model (no or wrong hub token). */
  | 'GatedModel'
  | 'Unschedulable';

export interface WorkloadFailure {
  kind: WorkloadFailureKind;
  message: string;
}

/** What the runtime saw of the endpoint's workload on this pass. */
export interface ObservedWorkload {
  replicas: number;
  readyReplicas: number;
  /** Most severe failure signal among current pods, if any. */
  failure?: WorkloadFailure;
  /** The newest Ready replica's start, stage by stage, when the runtime can tell. */
  lastStart?: StartTiming;
  /** Requests running + waiting across replicas, when the runtime can tell. */
  inFlight?: number;
  /** Nodes with a Ready replica, and when it became Ready there (runtimes with nodes). */
  nodes?: WarmNode[];
  /** Each current replica's start so far (runtimes with nodes): what a wake receipt reads. */
  starts?: ReplicaStart[];
}

/** A replica's start as far as it got: RFC 3339 times, absent until reached. */
export interface ReplicaStart {
  pod: string;
  node?: string;
  createdAt: string;
  scheduledAt?: string;
  runningAt?: string;
  readyAt?: string;
}

export interface Observed {
  workload: ObservedWorkload;
  /** Present only when a preflight ran this pass. */
  preflight?: PreflightResult;
  /** False when spec.hardware does not name a catalog instance type/count. */
  hardware: { ok: true } | { ok: false; message: string };
}

export interface PhaseEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

export interface Decision {
  phase: Phase;
  reason: string;
  message: string;
  desiredReplicas: number;
  /** Re-run the reconcile after this long even if nothing changes (deadlines, idle timeout). */
  requeueAfterMs?: number;
  memory: Memory;
  events: PhaseEvent[];
  conditions: PhaseCondition[];
  /** Set on the pass a wake completes. */
  wakeDurationSeconds?: number;
}

export interface Deadlines {
  provisioningSeconds: number;
  wakeSeconds: number;
  /** A hub that has not answered the pre-start checks this long since the build began fails it. */
  hubUnreachableSeconds: number;
}

export interface ScalingPolicy {
  /** In-flight requests one replica should carry before another is added. */
  targetInFlightPerReplica: number;
}

export type { DedicatedEndpoint };
