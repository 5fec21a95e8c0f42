// Local mode's workload driver: each replica of an endpoint is a child process on this machine (the
// engine simulator, or `vllm serve`) on 127.0.0.1 and a free port, started with the arguments the
// operator gives the vLLM container. It plays the kubelet's part: a replica is Ready once GET
// /health answers 200 (polled while starting, then as a readiness probe), a replica that exits is
// restarted with back-off, and an exit whose output names a fatal cause (CUDA OOM, gated repo) or
// too many restarts is reported as a failure for the shared phase machine to act on.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import type { InstanceType } from '@berth/crds';
import type { HubToken, ObservedWorkload, WorkloadDriver, WorkloadFailure } from '@berth/operator';
import { engineArgs, mostSevere } from '@berth/operator';
import type { Logger } from 'pino';
import { Listeners } from '../store.ts';
import { crashLoop, describe, fatalExit, type Exit } from './classify.ts';
import type { LogFiles } from './logfiles.ts';

export interface EngineCommand {
  command: string;
  /** Arguments before the `vllm serve` ones (e.g. the simulator's script). */
  prefix: string[];
}

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

interface Replica {
  child: ChildProcess;
  url: string;
  ready: boolean;
  stopping: boolean;
  healthFailures: number;
  exited: Promise<void>;
  poll?: NodeJS.Timeout;
}

/** One replica slot: its current process, and what its past processes did. */
interface Slot {
  index: number;
  replica?: Replica;
  restarts: number;
  restartTimer?: NodeJS.Timeout;
  failure?: WorkloadFailure;
  /** Output of the current process, last 16 KiB, for the exit reason. */
  tail: string;
}

interface EndpointProcesses {
  slots: Slot[];
  /** The arguments the slots run with; a change restarts them. */
  argsKey: string;
  args: string[];
}

export interface ProcessDriver extends WorkloadDriver {
  /** Base URLs of the endpoint's ready replicas. */
  addresses(id: string): readonly string[];
  watchAddresses(id: string, fn: (addresses: readonly string[]) => void): () => void;
  /** Stops every replica of the endpoint (terminated or deleted). */
  remove(id: string): Promise<void>;
  /** Gracefully stops every replica of every endpoint. */
  close(): Promise<void>;
}

const TAIL_BYTES = 16 * 1024;

export function processDriver(o: ProcessDriverOptions): ProcessDriver {
  const byId = new Map<string, EndpointProcesses>();
  const published = new Map<string, readonly string[]>();
  const listeners = new Listeners<readonly string[]>();
  const startupPollMs = o.startupPollMs ?? 200;
  const readinessPollMs = o.readinessPollMs ?? 5000;
  const restartDelayMs = o.restartDelayMs ?? 1000;
  let closing = false;
  mkdirSync(o.runDir, { recursive: true });

  const addressesOf = (id: string) =>
    (byId.get(id)?.slots ?? [])
      .map((s) => s.replica)
      .filter((r): r is Replica => !!r && r.ready && !r.stopping)
      .map((r) => r.url)
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

  const pidFile = (id: string, slot: Slot) => path.join(o.runDir, `${id}-${slot.index}.pid`);

  const start = async (id: string, eps: EndpointProcesses, slot: Slot) => {
    const port = await freePort();
    if (closing || !eps.slots.includes(slot) || slot.replica) return;
    const args = withAddress(eps.args, '127.0.0.1', port);
    const child = spawn(o.engine.command, [...o.engine.prefix, ...args], {
      // Its own process group: a terminal's Ctrl-C reaches the API, which drains the engines
      // itself, and a stop reaches everything the engine started (vLLM spawns workers).
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: o.env ?? process.env,
    });
    slot.tail = '';
    const replica: Replica = {
      child,
      url: `http://127.0.0.1:${port}`,
      ready: false,
      stopping: false,
      healthFailures: 0,
      exited: new Promise((resolve) => child.once('close', () => resolve())),
    };
    slot.replica = replica;
    const onOutput = (chunk: Buffer) => {
      o.logs.write(id, chunk);
      slot.tail = (slot.tail + chunk.toString('utf8')).slice(-TAIL_BYTES);
    };
    child.stdout!.on('data', onOutput);
    child.stderr!.on('data', onOutput);
    child.once('error', (err) => {
      // Spawning failed (e.g. the engine executable is gone): reported like an exit.
      slot.tail += `\n${err.message}\n`;
      o.logs.note(id, `replica ${slot.index} could not start: ${err.message}`);
    });
    if (child.pid) writeFileSync(pidFile(id, slot), String(child.pid));
    o.logs.note(
      id,
      `replica ${slot.index} starting (pid ${child.pid ?? '-'}, ${replica.url}): ${[o.engine.command, ...o.engine.prefix, ...args].join(' ')}`,
    );
    o.log.info(
      { endpoint: id, replica: slot.index, pid: child.pid, url: replica.url },
      'engine process started',
    );

    const probe = async () => {
      replica.poll = undefined;
      if (replica.stopping || child.exitCode !== null || child.signalCode !== null) return;
      const healthy = await fetch(`${replica.url}/health`, { signal: AbortSignal.timeout(2000) })
        .then((r) => r.status === 200)
        .catch(() => false);
      if (replica.stopping || slot.replica !== replica) return;
      if (healthy) {
        replica.healthFailures = 0;
        if (!replica.ready) {
          replica.ready = true;
          o.logs.note(id, `replica ${slot.index} is ready`);
          changed(id);
        }
      } else if (replica.ready && ++replica.healthFailures >= 3) {
        replica.ready = false;
        o.logs.note(id, `replica ${slot.index} failed its health check 3 times: not ready`);
        changed(id);
      }
      replica.poll = setTimeout(probe, replica.ready ? readinessPollMs : startupPollMs);
    };
    replica.poll = setTimeout(probe, startupPollMs);

    child.once('close', (code, signal) => {
      clearTimeout(replica.poll);
      rmSync(pidFile(id, slot), { force: true });
      if (slot.replica === replica) slot.replica = undefined;
      const exit: Exit = { code, signal, tail: slot.tail };
      o.logs.note(id, `replica ${slot.index} exited (${describe(exit)})`);
      if (replica.stopping || closing || !eps.slots.includes(slot)) return changed(id);
      o.log.warn({ endpoint: id, replica: slot.index, code, signal }, 'engine process exited');
      const fatal = fatalExit(exit);
      if (fatal) slot.failure = fatal;
      else if (slot.restarts >= o.crashLoopRestarts) slot.failure = crashLoop(exit, slot.restarts);
      else {
        const delay = Math.min(30_000, restartDelayMs * 2 ** slot.restarts);
        slot.restarts++;
        o.logs.note(id, `replica ${slot.index} restarts in ${delay} ms (restart ${slot.restarts})`);
        slot.restartTimer = setTimeout(() => {
          slot.restartTimer = undefined;
          void start(id, eps, slot);
        }, delay);
      }
      changed(id);
    });
  };

  const stopSlot = async (id: string, slot: Slot) => {
    clearTimeout(slot.restartTimer);
    slot.restartTimer = undefined;
    const r = slot.replica;
    if (!r) return;
    if (!r.stopping) {
      r.stopping = true;
      clearTimeout(r.poll);
      changed(id); // out of the backends before the engine starts draining
      o.logs.note(id, `replica ${slot.index} stopping (SIGTERM, up to ${o.stopGraceMs} ms to drain)`);
      signalGroup(r.child, 'SIGTERM');
      const kill = setTimeout(() => {
        o.logs.note(id, `replica ${slot.index} did not stop in time: SIGKILL`);
        signalGroup(r.child, 'SIGKILL');
      }, o.stopGraceMs);
      void r.exited.then(() => clearTimeout(kill));
    }
    await r.exited;
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
    await Promise.all([...slots.map((s) => stopSlot(id, s)), ...(draining.get(id) ?? [])]);
    if (eps) changed(id);
  };

  // Engines a previous run left behind (the API was killed without a chance to stop them).
  for (const f of readdirSync(o.runDir)) {
    if (!f.endsWith('.pid')) continue;
    const pid = Number(readFileSync(path.join(o.runDir, f), 'utf8'));
    rmSync(path.join(o.runDir, f), { force: true });
    if (!Number.isInteger(pid) || pid <= 1 || !isEngine(pid)) continue;
    try {
      process.kill(-pid, 'SIGTERM');
      o.log.warn({ pid }, 'stopped an engine process left by a previous run');
    } catch {
      // already gone
    }
  }

  return {
    async observe(ep): Promise<ObservedWorkload> {
      const slots = byId.get(ep.metadata.name)?.slots ?? [];
      const failure = mostSevere(slots.map((s) => s.failure).filter((f): f is WorkloadFailure => !!f));
      return {
        // Starting, running or waiting to restart (a pod in CrashLoopBackOff counts too).
        replicas: slots.filter((s) => !s.failure && !s.replica?.stopping).length,
        readyReplicas: slots.filter((s) => s.replica?.ready && !s.replica.stopping).length,
        ...(failure ? { failure } : {}),
      };
    },

    async apply(ep, instanceType: InstanceType | undefined, replicas) {
      const id = ep.metadata.name;
      if (closing) return;
      const want = instanceType ? replicas : 0;
      const args = [...engineArgs(ep), ...o.extraArgs];
      const argsKey = JSON.stringify(args);
      let eps = byId.get(id);
      if (eps && (want === 0 || eps.argsKey !== argsKey)) {
        // Scale to zero (hibernate, fail) or the spec changed: stop what runs, gracefully.
        await stopAll(id);
        eps = undefined;
      }
      if (want === 0) return;
      if (!eps) byId.set(id, (eps = { slots: [], argsKey, args }));
      while (eps.slots.length > want) track(id, stopSlot(id, eps.slots.pop()!));
      while (eps.slots.length < want) {
        const slot: Slot = { index: eps.slots.length, restarts: 0, tail: '' };
        eps.slots.push(slot);
        void start(id, eps, slot);
      }
    },

    url(ep) {
      return addressesOf(ep.metadata.name)[0] ?? '';
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

/** The `vllm serve` arguments with the local bind address instead of the pod's. */
export function withAddress(args: readonly string[], host: string, port: number): string[] {
  const out = [...args];
  const set = (flag: string, value: string) => {
    const i = out.indexOf(flag);
    if (i >= 0) out[i + 1] = value;
    else out.push(flag, value);
  };
  set('--host', host);
  set('--port', String(port));
  return out;
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals) {
  if (!child.pid || child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    child.kill(signal);
  }
}

function isEngine(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('--served-model-name');
  } catch {
    return false;
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}
