// One replica of a local endpoint, supervised as the kubelet supervises a container: a child process
// on 127.0.0.1 and a free port, Ready once GET /health answers 200 (polled while it starts, then as a
// readiness probe), restarted with back-off when it exits, and given up on — a failure for the phase
// machine — when its output names a fatal cause (CUDA OOM, gated repo) or it keeps exiting.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import type { Logger } from 'pino';
import type { ReplicaStart, WorkloadFailure } from '../core/types.ts';
import { crashLoop, describe, fatalExit, type Exit } from './exits.ts';
import type { LogFiles } from './logfiles.ts';
import type { PidFiles } from './reaper.ts';

export interface EngineCommand {
  command: string;
  /** Arguments before the `vllm serve` ones (e.g. the simulator's script). */
  prefix: string[];
}

export interface SupervisorOptions {
  engine: EngineCommand;
  logs: LogFiles;
  log: Logger;
  pids: PidFiles;
  /** Restarts after which a replica that keeps exiting is a CrashLoop failure. */
  crashLoopRestarts: number;
  /** How long a stopping replica may drain after SIGTERM before its process group is killed. */
  stopGraceMs: number;
  /** Health polling while a replica starts, and the readiness probe period once it is up. */
  startupPollMs: number;
  readinessPollMs: number;
  /** First restart delay (doubles per restart, capped at 30 s). */
  restartDelayMs: number;
  env?: NodeJS.ProcessEnv;
}

interface Process {
  child: ChildProcess;
  url: string;
  ready: boolean;
  /** Spawned, and Ready (its first health check answered 200): a wake receipt's times. */
  spawnedAt: string;
  readyAt?: string;
  stopping: boolean;
  healthFailures: number;
  exited: Promise<void>;
  poll?: NodeJS.Timeout;
}

const TAIL_BYTES = 16 * 1024;

/** One replica slot: its current process, and what its past processes did. */
export class ReplicaSlot {
  readonly id: string;
  readonly index: number;
  private readonly args: readonly string[];
  private readonly o: SupervisorOptions;
  /** Told whenever the replica changes (started, ready, exited). */
  private readonly changed: () => void;
  restarts = 0;
  failure: WorkloadFailure | undefined;
  private current: Process | undefined;
  private restartTimer: NodeJS.Timeout | undefined;
  /** Output of the current process, last 16 KiB, for the exit reason. */
  private tail = '';
  /** Stopped for good (scaled down, the endpoint stopped, or the driver closing). */
  private retired = false;
  /** When the current (or next) process was asked for: the slot made, or its restart due. */
  private createdAt = new Date().toISOString();

  constructor(id: string, index: number, args: readonly string[], o: SupervisorOptions, changed: () => void) {
    this.id = id;
    this.index = index;
    this.args = args;
    this.o = o;
    this.changed = changed;
  }

  /** The base URL while the replica is Ready and not stopping. */
  get url(): string | undefined {
    const p = this.current;
    return p?.ready && !p.stopping ? p.url : undefined;
  }

  /** A process of it runs (starting, ready or draining): what holds the GPUs, for billing. */
  get running(): boolean {
    return this.current !== undefined;
  }

  /** Retired and its process gone: nothing of it will run again. */
  get done(): boolean {
    return this.retired && !this.current;
  }

  /**
   * The current process's start as a pod's would read (core/types.ts ReplicaStart): asked for, placed
   * on this machine and running once spawned (no scheduler, no image), Ready on its first good health
   * check; only asked for while it waits to be spawned (a restart's back-off too).
   */
  timing(node: string): ReplicaStart | undefined {
    const p = this.current;
    if (this.retired || this.failure || p?.stopping) return undefined;
    if (!p) return { pod: `${this.id}-${this.index}`, createdAt: this.createdAt };
    const s: ReplicaStart = {
      pod: `${this.id}-${this.index}`,
      node,
      createdAt: this.createdAt,
      scheduledAt: p.spawnedAt,
      runningAt: p.spawnedAt,
    };
    if (p.readyAt) s.readyAt = p.readyAt;
    return s;
  }

  /** A replica as a Deployment counts it: starting, running or waiting to restart, not failed or stopping. */
  get counted(): boolean {
    return !this.failure && !this.current?.stopping;
  }

  async start(): Promise<void> {
    await this.o.pids.reaped; // engines a killed API left behind hold GPUs until they are gone
    const port = await freePort();
    if (this.retired || this.current) return;
    const { id, o } = this;
    const args = withAddress(this.args, '127.0.0.1', port);
    const child = spawn(o.engine.command, [...o.engine.prefix, ...args], {
      // Its own process group: a terminal's Ctrl-C reaches the API, which drains the engines
      // itself, and a stop reaches everything the engine started (vLLM spawns workers).
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: o.env ?? process.env,
    });
    this.tail = '';
    const p: Process = {
      child,
      url: `http://127.0.0.1:${port}`,
      ready: false,
      spawnedAt: new Date().toISOString(),
      stopping: false,
      healthFailures: 0,
      exited: new Promise((resolve) => child.once('close', () => resolve())),
    };
    this.current = p;
    const onOutput = (chunk: Buffer) => {
      o.logs.write(id, chunk);
      this.tail = (this.tail + chunk.toString('utf8')).slice(-TAIL_BYTES);
    };
    child.stdout!.on('data', onOutput);
    child.stderr!.on('data', onOutput);
    child.once('error', (err) => {
      // Spawning failed (e.g. the engine executable is gone): reported like an exit.
      this.tail += `\n${err.message}\n`;
      o.logs.note(id, `replica ${this.index} could not start: ${err.message}`);
    });
    if (child.pid) o.pids.write(id, this.index, child.pid);
    o.logs.note(
      id,
      `replica ${this.index} starting (pid ${child.pid ?? '-'}, ${p.url}): ${[o.engine.command, ...o.engine.prefix, ...args].join(' ')}`,
    );
    o.log.info({ endpoint: id, replica: this.index, pid: child.pid, url: p.url }, 'engine process started');
    this.changed();

    const probe = async () => {
      p.poll = undefined;
      if (p.stopping || child.exitCode !== null || child.signalCode !== null) return;
      const healthy = await fetch(`${p.url}/health`, { signal: AbortSignal.timeout(2000) })
        .then((r) => r.status === 200)
        .catch(() => false);
      if (p.stopping || this.current !== p) return;
      if (healthy) {
        p.healthFailures = 0;
        if (!p.ready) {
          p.ready = true;
          p.readyAt ??= new Date().toISOString();
          o.logs.note(id, `replica ${this.index} is ready`);
          this.changed();
        }
      } else if (p.ready && ++p.healthFailures >= 3) {
        p.ready = false;
        o.logs.note(id, `replica ${this.index} failed its health check 3 times: not ready`);
        this.changed();
      }
      p.poll = setTimeout(probe, p.ready ? o.readinessPollMs : o.startupPollMs);
    };
    p.poll = setTimeout(probe, o.startupPollMs);

    child.once('close', (code, signal) => {
      clearTimeout(p.poll);
      o.pids.remove(id, this.index);
      if (this.current === p) this.current = undefined;
      const exit: Exit = { code, signal, tail: this.tail };
      o.logs.note(id, `replica ${this.index} exited (${describe(exit)})`);
      if (p.stopping || this.retired) return this.changed();
      o.log.warn({ endpoint: id, replica: this.index, code, signal }, 'engine process exited');
      const fatal = fatalExit(exit);
      if (fatal) this.failure = fatal;
      else if (this.restarts >= o.crashLoopRestarts) this.failure = crashLoop(exit, this.restarts);
      else {
        const delay = Math.min(30_000, o.restartDelayMs * 2 ** this.restarts);
        this.restarts++;
        o.logs.note(id, `replica ${this.index} restarts in ${delay} ms (restart ${this.restarts})`);
        this.restartTimer = setTimeout(() => {
          this.restartTimer = undefined;
          this.createdAt = new Date().toISOString();
          void this.start();
        }, delay);
      }
      this.changed();
    });
  }

  /** Stops the replica for good: SIGTERM, then SIGKILL after the grace period. Resolves once it exited. */
  async stop(): Promise<void> {
    this.retired = true;
    clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
    const p = this.current;
    if (!p) return;
    if (!p.stopping) {
      p.stopping = true;
      clearTimeout(p.poll);
      this.changed(); // out of the addresses before the engine starts draining
      this.o.logs.note(
        this.id,
        `replica ${this.index} stopping (SIGTERM, up to ${this.o.stopGraceMs} ms to drain)`,
      );
      signalGroup(p.child, 'SIGTERM');
      const kill = setTimeout(() => {
        this.o.logs.note(this.id, `replica ${this.index} did not stop in time: SIGKILL`);
        signalGroup(p.child, 'SIGKILL');
      }, this.o.stopGraceMs);
      void p.exited.then(() => clearTimeout(kill));
    }
    await p.exited;
  }
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
