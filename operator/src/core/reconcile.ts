import type {
  Catalog,
  Condition,
  DedicatedEndpoint,
  DedicatedEndpointStatus,
  Phase,
  StartTiming,
  WakeReceipt,
} from '@berth/crds';
import {
  ACTIVITY_REFRESH_SECONDS,
  ANNOTATION_WAKE_FIRST_BYTE,
  ANNOTATION_IN_FLIGHT,
  ANNOTATION_LAST_ACTIVITY,
  checkHardware,
  FINALIZER,
  parseModelSource,
} from '@berth/crds';
import type { Logger } from 'pino';
import type { PhaseOptions } from './phase.ts';
import { decide } from './phase.ts';
import { preferredNodes, wakeReceipt, warmNodes } from './placement.ts';
import type { PreflightOptions } from './preflight.ts';
import { preflight } from './preflight.ts';
import type { HandlerResult } from './queue.ts';
import type { EndpointStore, TerminationHook, WorkloadDriver } from './runtime.ts';
import type { Decision, Observed, PreflightResult } from './types.ts';

export interface ReconcileDeps {
  store: EndpointStore;
  driver: WorkloadDriver;
  termination: TerminationHook;
  catalog: Catalog;
  phase: PhaseOptions;
  /** Model hub checks; absent: skipped (a runtime with no hub to ask, e.g. local mode offline). */
  preflight?: PreflightOptions;
  log: Logger;
  now?: () => Date;
  onDecision?: (ep: DedicatedEndpoint, decision: Decision) => void;
  /** A replica start not seen before (its durations, once per pod). */
  onStart?: (timing: StartTiming) => void;
  /** A wake completed (its receipt, once per wake). */
  onWake?: (receipt: WakeReceipt) => void;
}

/** One level-triggered pass for one key: read the cache, decide, apply, write status once. */
export async function reconcileKey(key: string, deps: ReconcileDeps): Promise<HandlerResult> {
  const ep = deps.store.get(key);
  if (!ep) return; // deleted; owner references garbage-collect the children
  const log = deps.log.child({ endpoint: key });
  const now = deps.now?.() ?? new Date();
  const finalizers = ep.metadata.finalizers ?? [];

  if (ep.metadata.deletionTimestamp) {
    if (!finalizers.includes(FINALIZER)) return;
    // Recorded first: a runtime's termination may remove where events go (local mode's log file).
    await deps.store.recordEvent(ep, {
      type: 'Normal',
      reason: 'Terminated',
      message: 'Endpoint terminated; its replicas are removed',
    });
    await deps.termination.onTerminate(ep);
    await deps.store.setFinalizer(ep, false);
    log.info('endpoint terminated; finalizer removed');
    return;
  }
  if (!finalizers.includes(FINALIZER)) {
    await deps.store.setFinalizer(ep, true);
    log.debug('finalizer added');
  }

  const generation = ep.metadata.generation ?? 0;
  const hw = checkHardware(deps.catalog, ep.spec.hardware);
  const instanceType = hw.ok ? hw.instanceType : undefined;
  const status = ep.status ?? {};
  const failedThisGeneration = status.failure?.generation === generation;

  let pf: PreflightResult | undefined;
  if (instanceType && status.preflightGeneration !== generation && !failedThisGeneration) {
    const source = parseModelSource(ep.spec.model.source);
    // The hub checks run only where they can answer: hub sources, when enabled.
    pf =
      source.kind !== 'hub'
        ? await deps.driver.checkSource(ep, source)
        : deps.preflight
          ? await preflight(ep, instanceType, await deps.driver.hubToken(ep), deps.preflight)
          : { kind: 'passed', message: 'Model checks skipped: no model hub configured' };
    log.info({ preflight: pf }, 'model checks ran');
  }

  const workload = await deps.driver.observe(ep);
  const observed: Observed = {
    workload: { ...workload, inFlight: workload.inFlight ?? reportedInFlight(ep, now) },
    hardware: hw.ok ? { ok: true } : { ok: false, message: `${hw.field}: ${hw.message}` },
    ...(pf ? { preflight: pf } : {}),
  };
  const decision = decide(ep, observed, now, deps.phase);
  await deps.driver.apply(ep, instanceType, decision.desiredReplicas);

  const next = nextStatus(ep, decision, observed, deps.driver.url(ep), now);
  // The status and the Events tell the same transition to different readers, and neither waits on
  // the other: written at once, a pass costs one round trip here instead of two (the Events in
  // their own order).
  await Promise.all([
    sameStatus(status, next) ? undefined : deps.store.writeStatus(ep, next),
    (async () => {
      for (const event of decision.events) await deps.store.recordEvent(ep, event);
    })(),
  ]);
  if (decision.phase !== status.phase) {
    log.info(
      { from: status.phase ?? null, to: decision.phase, reason: decision.reason },
      `endpoint is now ${decision.phase}`,
    );
  }
  deps.onDecision?.(ep, decision);
  const started = observed.workload.lastStart;
  if (started && started.pod !== status.lastStart?.pod) deps.onStart?.(started);
  const wake = next.lastWake;
  if (wake?.engineReadyAt && !(status.lastWake?.scaledAt === wake.scaledAt && status.lastWake.engineReadyAt))
    deps.onWake?.(wake);
  return decision.requeueAfterMs !== undefined ? { requeueAfterMs: decision.requeueAfterMs } : undefined;
}

/** In-flight count the API reported on the resource, if its activity annotation is fresh. */
export function reportedInFlight(ep: DedicatedEndpoint, now: Date): number | undefined {
  const a = ep.metadata.annotations ?? {};
  const n = Number(a[ANNOTATION_IN_FLIGHT]);
  const at = Date.parse(a[ANNOTATION_LAST_ACTIVITY] ?? '');
  if (!Number.isInteger(n) || n < 0 || Number.isNaN(at)) return undefined;
  return now.getTime() - at <= 3 * ACTIVITY_REFRESH_SECONDS * 1000 ? n : undefined;
}

export function nextStatus(
  ep: DedicatedEndpoint,
  d: Decision,
  observed: Observed,
  url: string,
  now: Date,
): DedicatedEndpointStatus {
  const prev = ep.status ?? {};
  const generation = ep.metadata.generation ?? 0;
  const conditions: Condition[] = d.conditions.map((c) => {
    const old = prev.conditions?.find((o) => o.type === c.type);
    const same = old?.status === c.status;
    return {
      ...c,
      observedGeneration: generation,
      lastTransitionTime: same && old?.lastTransitionTime ? old.lastTransitionTime : now.toISOString(),
    };
  });
  const phaseChanged = prev.phase !== d.phase;
  const warm = warmNodes(observed.workload.nodes, prev.warmNodes);
  return stripUndefined({
    phase: d.phase,
    reason: d.reason,
    message: d.message,
    observedGeneration: generation,
    replicas: observed.workload.replicas,
    readyReplicas: observed.workload.readyReplicas,
    url,
    lastTransitionTime:
      phaseChanged || !prev.lastTransitionTime ? now.toISOString() : prev.lastTransitionTime,
    conditions,
    lastStart: observed.workload.lastStart ?? prev.lastStart,
    warmNodes: warm,
    preferredNodes: preferredNodes(d.phase, warm, prev.preferredNodes),
    lastWake: wakeReceipt(
      prev,
      d,
      observed.workload.starts,
      ep.metadata.annotations?.[ANNOTATION_WAKE_FIRST_BYTE],
    ),
    ...d.memory,
  });
}

function stripUndefined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}

function sameStatus(a: DedicatedEndpointStatus, b: DedicatedEndpointStatus): boolean {
  return canonical(a) === canonical(b);
}

function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>).filter(([, x]) => x !== undefined);
    entries.sort(([a], [b]) => (a < b ? -1 : 1));
    return `{${entries.map(([k, x]) => `${k}:${canonical(x)}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

export type { Phase };
