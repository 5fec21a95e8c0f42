// Local mode's workload driver: each replica of an endpoint is a supervised child process on this
// machine (the engine simulator, or `vllm serve`), started with the arguments the operator gives the
// vLLM container (core/engine-args.ts) plus the local extras. It observes and scales the replicas for
// the shared reconciler, and publishes the Ready replicas' addresses (the local counterpart of the
// pod watch the API keeps on Kubernetes).
import { stat } from 'node:fs/promises';
import { hostname } from 'node:os';
import type { InstanceType } from '@berth/crds';
import { parseModelSource } from '@berth/crds';
import type { Logger } from 'pino';
import { engineArgs } from '../core/engine-args.ts';
import { mostSevere } from '../core/failures.ts';
import { Listeners } from '../core/listeners.ts';
import type { HubToken } from '../core/preflight.ts';
import type { WorkloadDriver } from '../core/runtime.ts';
import type { ObservedWorkload, PreflightResult, WorkloadFailure } from '../core/types.ts';
import type { LogFiles } from './logfiles.ts';
import { pidFiles } from './reaper.ts';
import { ReplicaSlot, type EngineCommand, type SupervisorOptions } from './supervisor.ts';

export interface ProcessDriverOptions {
  engine: EngineCommand;
  /** Appended to every endpoint's engine arguments (BERTH_LOCAL_ENGINE_ARGS). */
  extraArgs: string[];
  /** Directory for replica pid files, so a restarted API can stop engines a crash left behind. */
  runDir: string;
  logs: LogFiles;
  log: Logger;
  /** Restarts after which a replica that keeps exiting is a CrashLoop failure. */
  crashLoopRestarts: number;
  /** How long a stopping replica may drain after SIGTERM before its process group is killed. */
  stopGraceMs: number;
  /** Health polling while a replica starts, and the readiness probe period once it is up. */
  startupPollMs?: number;
  readinessPollMs?: number;
  /** First restart delay (doubles per restart, capped at 30 s). */
  restartDelayMs?: number;
  env?: NodeJS.ProcessEnv;
  /** Told the endpoint id whenever one of its replicas changes (started, ready, exited). */
  onChange: (id: string) => void;
}

export interface ProcessDriver extends WorkloadDriver {
  /** Base URLs of the endpoint's ready replicas. */
  addresses(id: string): readonly string[];
  watchAddresses(id: string, fn: (addresses: readonly string[]) => void): () => void;
  /** Processes of the endpoint that run now (starting, ready or draining): the GPUs it holds. */
  running(id: string): number;
  /** Stops every replica of the endpoint (terminated or deleted). */
  remove(id: string): Promise<void>;
  /** Gracefully stops every replica of every endpoint. */
  close(): Promise<void>;
}

interface EndpointProcesses {
  slots: ReplicaSlot[];
  /** The arguments the slots run with; a change restarts them. */
  argsKey: string;
}

export function processDriver(o: ProcessDriverOptions): ProcessDriver {
  const byId = new Map<string, EndpointProcesses>();
  const node = hostname();
  /** Every slot until it is retired and its process gone, draining ones included. */
  const slots = new Set<ReplicaSlot>();
  const published = new Map<string, readonly string[]>();
  const listeners = new Listeners<readonly string[]>();
  let closing = false;
  const supervision: SupervisorOptions = {
    engine: o.engine,
    logs: o.logs,
    log: o.log,
    pids: pidFiles(o.runDir, o.log, o.stopGraceMs),
    crashLoopRestarts: o.crashLoopRestarts,
    stopGraceMs: o.stopGraceMs,
    // Every 50 ms while a replica starts: the readiness a held call waits for is seen within 50 ms
    // (a wake's Berth share, BENCHMARKS.md), for a GET /health on the loopback 20 times a second.
    startupPollMs: o.startupPollMs ?? 50,
    readinessPollMs: o.readinessPollMs ?? 5000,
    restartDelayMs: o.restartDelayMs ?? 1000,
    ...(o.env ? { env: o.env } : {}),
  };

  const addressesOf = (id: string) =>
    (byId.get(id)?.slots ?? [])
      .map((s) => s.url)
      .filter((u): u is string => u !== undefined)
      .sort();

  const changed = (id: string) => {
    const now = addressesOf(id);
    const before = published.get(id) ?? [];
    if (now.length !== before.length || now.some((a, i) => a !== before[i])) {
      if (now.length) published.set(id, now);
      else published.delete(id);
      listeners.emit(id, now);
    }
    if (!closing) o.onChange(id);
  };

  /** Replicas removed by a scale-down, still draining: waited for by stopAll and close. */
  const draining = new Map<string, Set<Promise<void>>>();
  const track = (id: string, p: Promise<void>) => {
    let set = draining.get(id);
    if (!set) draining.set(id, (set = new Set()));
    set.add(p);
    void p.finally(() => {
      set.delete(p);
      if (!set.size && draining.get(id) === set) draining.delete(id);
    });
  };

  const stopAll = async (id: string) => {
    const eps = byId.get(id);
    const slots = eps?.slots.splice(0) ?? [];
    if (eps) byId.delete(id);
    await Promise.all([...slots.map((s) => s.stop()), ...(draining.get(id) ?? [])]);
    if (eps) changed(id);
  };

  return {
    running(id) {
      let n = 0;
      for (const s of slots) {
        if (s.done) slots.delete(s);
        else if (s.id === id && s.running) n++;
      }
      return n;
    },

    async observe(ep): Promise<ObservedWorkload> {
      const slots = byId.get(ep.metadata.name)?.slots ?? [];
      const failure = mostSevere(slots.map((s) => s.failure).filter((f): f is WorkloadFailure => !!f));
      // This machine is the one node: its caches (HF_HOME, VLLM_CACHE_ROOT) hold what a replica left.
      const starts = slots.flatMap((s) => s.timing(node) ?? []);
      const nodes = starts.flatMap((s) => (s.readyAt ? [{ name: node, readyAt: s.readyAt }] : []));
      return {
        ...(starts.length ? { starts } : {}),
        ...(nodes.length ? { nodes } : {}),
        // Starting, running or waiting to restart (a pod in CrashLoopBackOff counts too).
        replicas: slots.filter((s) => s.counted).length,
        readyReplicas: slots.filter((s) => s.url !== undefined).length,
        ...(failure ? { failure } : {}),
      };
    },

    async apply(ep, instanceType: InstanceType | undefined, replicas) {
      const id = ep.metadata.name;
      if (closing) return;
      const want = instanceType ? replicas : 0;
      const source = parseModelSource(ep.spec.model.source);
      const args = [...engineArgs(ep, source.kind === 'path' ? source.path : undefined), ...o.extraArgs];
      const argsKey = JSON.stringify(args);
      let eps = byId.get(id);
      if (eps && (want === 0 || eps.argsKey !== argsKey)) {
        // Scale to zero (hibernate, fail) or the spec changed: stop what runs, gracefully.
        await stopAll(id);
        eps = undefined;
      }
      if (want === 0) return;
      if (!eps) byId.set(id, (eps = { slots: [], argsKey }));
      while (eps.slots.length > want) track(id, eps.slots.pop()!.stop());
      while (eps.slots.length < want) {
        const slot = new ReplicaSlot(id, eps.slots.length, args, supervision, () => changed(id));
        slots.add(slot);
        eps.slots.push(slot);
        void slot.start();
      }
    },

    url(ep) {
      return addressesOf(ep.metadata.name)[0] ?? '';
    },

    async checkSource(ep, source): Promise<PreflightResult> {
      if (source.kind !== 'path')
        return {
          kind: 'failed',
          reason: 'ModelSourceUnreachable',
          message: `Local mode runs models from the hub or from a directory on this machine (file:///path); spec.model.source ${ep.spec.model.source} needs Kubernetes. Use a local directory, or run the endpoint on a cluster.`,
        };
      const ok = await stat(source.path).then(
        (s) => s.isDirectory(),
        () => false,
      );
      return ok
        ? { kind: 'passed', message: `Weights from ${source.path}` }
        : {
            kind: 'failed',
            reason: 'ModelSourceUnreachable',
            message: `spec.model.source names ${source.path}, which is not a directory on this machine: download the weights there or fix spec.model.source.`,
          };
    },

    async hubToken(ep): Promise<HubToken> {
      if (!ep.spec.model.hubTokenSecretRef) return { kind: 'none' };
      const token = (o.env ?? process.env).HF_TOKEN;
      return token
        ? { kind: 'found', token }
        : {
            kind: 'missing',
            message:
              'The endpoint names a hub token, and in local mode engines get HF_TOKEN from the API process: set HF_TOKEN and create the endpoint again.',
          };
    },

    addresses: (id) => published.get(id) ?? [],
    watchAddresses: (id, fn) => listeners.add(id, fn),
    remove: (id) => stopAll(id),

    async close() {
      closing = true;
      await Promise.all([...new Set([...byId.keys(), ...draining.keys()])].map((id) => stopAll(id)));
    },
  };
}
