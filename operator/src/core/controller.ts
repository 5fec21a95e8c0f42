import type { Catalog, DedicatedEndpoint, StartTiming, WakeReceipt } from '@berth/crds';
import { ANNOTATION_WAKE_REQUESTED } from '@berth/crds';
import type { Logger } from 'pino';
import type { ReconcilerConfig } from './config.ts';
import { errorText } from './error-text.ts';
import type { PreflightOptions } from './preflight.ts';
import { WorkQueue, type Outcome } from './queue.ts';
import { reconcileKey, type ReconcileDeps } from './reconcile.ts';
import type { EndpointStore, TerminationHook, WorkloadDriver } from './runtime.ts';
import type { Decision } from './types.ts';

// The controller loop, written once for every runtime: a keyed work queue whose handler is one
// level-triggered reconcile pass, the runtime's change notifications as the queue's input, every key
// once the runtime's caches are filled, a periodic resync, and the outcome of each pass logged.

/** A runtime the controller drives (Kubernetes informers and server-side apply, or local processes). */
export interface ControlledRuntime {
  store: EndpointStore;
  driver: WorkloadDriver;
  /** Every endpoint key the runtime holds: the first pass after start, and the periodic resync. */
  keys(): string[];
  /** Resolves once the runtime's caches hold every endpoint. */
  start(): Promise<void>;
  /** Stops watching and running; called after the queue has drained. */
  stop(): Promise<void>;
  /**
   * Removes what the runtime runs for an endpoint being terminated, before its finalizer goes. A
   * runtime without a garbage collector (local processes) does it here; owner references do it on
   * Kubernetes.
   */
  terminate?(ep: DedicatedEndpoint): Promise<void>;
  /** Called after a pass that found no endpoint for the key: the same clean-up, for a key. */
  gone?(key: string): Promise<void>;
}

export interface ControllerOptions {
  config: ReconcilerConfig;
  catalog: Catalog;
  /** Effects outside the runtime before an endpoint is gone (billing), after the runtime's own; none by default. */
  termination?: TerminationHook;
  log: Logger;
  now?: () => Date;
  /** The model hub client of the pre-start checks (tests pass a fake hub's). */
  fetch?: typeof fetch;
  /** Metrics: a timer around each pass, each pass's outcome, each decision. */
  observer?: {
    pass?(): () => void;
    outcome?(outcome: Outcome): void;
    decision?(ep: DedicatedEndpoint, decision: Decision): void;
    start?(timing: StartTiming): void;
    /** A wake completed: its receipt, once. */
    wake?(receipt: WakeReceipt): void;
  };
}

export interface Controller<R extends ControlledRuntime> {
  readonly runtime: R;
  /** Keys waiting in the queue. */
  readonly depth: number;
  /** True once the runtime's caches are filled and every key has been queued. */
  readonly synced: boolean;
  /** Resolves when synced (or when stopped before). */
  readonly started: Promise<void>;
  /**
   * The API's wake signal, told directly (POST /wake): the pass runs at once, as if the wake
   * annotation `requestedAt` were already on the endpoint, instead of after the API server has
   * written it and the watch has brought it back. The annotation (which the API writes too) stays
   * the record: the hint is dropped once the cache holds it or the status shows it seen.
   */
  wake(key: string, requestedAt: string): WakeHintAnswer;
  /** Stops the resync, drains the queue, then stops the runtime. */
  stop(): Promise<void>;
}

/** `accepted`: queued first; `unknown`: no such endpoint; `awake`: not hibernated; `stale`: older than the hibernation. */
export type WakeHintAnswer = 'accepted' | 'unknown' | 'awake' | 'stale';

/** How long a hint stands in for an annotation that never arrives (the API's write failed). */
const HINT_TTL_MS = 60_000;

/**
 * Starts the loop over the runtime `build` makes. The runtime needs the queue (its watches enqueue
 * keys) and the queue's handler needs the runtime: `build` gets `enqueue`, and keys it enqueues
 * before it returns are held until then. `urgent` (a wake requested: wakePending) goes first.
 */
export function startController<R extends ControlledRuntime>(
  o: ControllerOptions,
  build: (enqueue: (key: string, urgent?: boolean) => void) => R,
): Controller<R> {
  const { config, log } = o;
  const preflight: PreflightOptions | undefined =
    config.hfEndpoint && config.preflight !== false
      ? {
          hfEndpoint: config.hfEndpoint,
          gpuMemoryUtilization: config.gpuMemoryUtilization,
          timeoutMs: 10_000,
          ...(o.fetch ? { fetch: o.fetch } : {}),
        }
      : undefined;
  // Set once `build` has returned; the queue's handler only runs after that.
  let bound: { runtime: R; deps: ReconcileDeps } | undefined = undefined;
  const early: string[] = [];

  const queue = new WorkQueue(
    async (key) => {
      const { runtime, deps } = bound!;
      const end = o.observer?.pass?.();
      try {
        const result = await reconcileKey(key, deps);
        if (runtime.gone && !runtime.store.get(key)) await runtime.gone(key);
        return result;
      } finally {
        end?.();
      }
    },
    {
      concurrency: config.concurrency,
      onOutcome: (key, outcome, err) => {
        o.observer?.outcome?.(outcome);
        if (outcome === 'error' || outcome === 'terminal')
          log.warn({ endpoint: key, outcome, err: err ? errorText(err) : undefined }, 'reconcile failed');
      },
    },
  );

  const rt = build((key, urgent) => (bound ? queue.add(key, urgent) : early.push(key)));
  const hints = new Map<string, { at: string; until: number }>();
  /** The cached endpoint, with a wake hint the cache does not show yet in place of its annotation. */
  const withHint = (key: string): DedicatedEndpoint | undefined => {
    const ep = rt.store.get(key);
    const hint = hints.get(key);
    if (!ep || !hint) return ep;
    const at = Date.parse(hint.at);
    const covers = (v: string | undefined) => v !== undefined && Date.parse(v) >= at;
    if (
      covers(ep.metadata.annotations?.[ANNOTATION_WAKE_REQUESTED]) ||
      covers(ep.status?.wakeRequestSeen) ||
      Date.now() > hint.until
    ) {
      hints.delete(key);
      return ep;
    }
    const annotations = { ...ep.metadata.annotations, [ANNOTATION_WAKE_REQUESTED]: hint.at };
    return { ...ep, metadata: { ...ep.metadata, annotations } };
  };
  bound = {
    runtime: rt,
    deps: {
      store: {
        get: withHint,
        writeStatus: (ep, status) => rt.store.writeStatus(ep, status),
        setFinalizer: (ep, present) => rt.store.setFinalizer(ep, present),
        recordEvent: (ep, event) => rt.store.recordEvent(ep, event),
      },
      driver: rt.driver,
      termination: {
        onTerminate: async (ep) => {
          await rt.terminate?.(ep);
          await o.termination?.onTerminate(ep);
        },
      },
      catalog: o.catalog,
      phase: {
        deadlines: {
          provisioningSeconds: config.provisioningTimeoutSeconds,
          wakeSeconds: config.wakeTimeoutSeconds,
          hubUnreachableSeconds: config.hubUnreachableSeconds ?? 60,
        },
        scaling: { targetInFlightPerReplica: config.targetInFlightPerReplica },
      },
      ...(preflight ? { preflight } : {}),
      log,
      ...(o.now ? { now: o.now } : {}),
      ...(o.observer?.decision ? { onDecision: o.observer.decision } : {}),
      ...(o.observer?.start ? { onStart: o.observer.start } : {}),
      ...(o.observer?.wake ? { onWake: o.observer.wake } : {}),
    },
  };
  for (const key of early.splice(0)) queue.add(key);

  const resync = setInterval(() => rt.keys().forEach((k) => queue.add(k)), config.resyncSeconds * 1000);
  resync.unref();
  let halted = false;
  let synced = false;
  const started = rt.start().then(() => {
    if (halted) return;
    synced = true;
    const keys = rt.keys();
    log.info({ endpoints: keys.length }, 'caches synced; reconciling');
    for (const k of keys) queue.add(k);
  });
  // Whoever awaits `started` sees the failure; nobody awaiting it must not crash the process.
  started.catch((err: unknown) => log.error({ err: errorText(err) }, 'the runtime failed to start'));

  return {
    runtime: rt,
    get depth() {
      return queue.depth;
    },
    get synced() {
      return synced;
    },
    started,
    wake(key, requestedAt) {
      const ep = rt.store.get(key);
      if (!ep || ep.metadata.deletionTimestamp) return 'unknown';
      const hibernatedAt = ep.status?.hibernatedAt;
      if (!hibernatedAt) return 'awake';
      if (Date.parse(requestedAt) < Date.parse(hibernatedAt)) return 'stale';
      hints.set(key, { at: requestedAt, until: Date.now() + HINT_TTL_MS });
      queue.add(key, true);
      return 'accepted';
    },
    async stop() {
      halted = true;
      clearInterval(resync);
      await queue.shutdown();
      await rt.stop();
      await started.catch(() => {});
    },
  };
}
