// The control plane's processes, measured from /proc and their own metrics: resident memory, CPU
// time (each process's and the machine's), etcd's database size. Re-exported by ./lib.ts.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { basename } from 'node:path';

/** Resident memory (MiB) of the local control plane's processes, by command name. */
export function controlPlaneRss(): Record<string, number> {
  let out = '';
  try {
    out = execFileSync(
      'ps',
      ['-C', 'etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kwok', '-o', 'comm=,rss='],
      {
        encoding: 'utf8',
      },
    );
  } catch {
    return {};
  }
  const rss: Record<string, number> = {};
  for (const line of out.trim().split('\n')) {
    const [comm, kb] = line.trim().split(/\s+/);
    if (comm && kb) rss[comm] = (rss[comm] ?? 0) + Math.round(Number(kb) / 1024);
  }
  return rss;
}

/** etcd's database size (MiB), read from its metrics (the 2 GiB quota must not be reached). */
export async function etcdDbMiB(): Promise<number | undefined> {
  try {
    const args = execFileSync('ps', ['-C', 'etcd', '-o', 'args='], { encoding: 'utf8' });
    const url = /--listen-client-urls=(\S+)/.exec(args)?.[1]?.split(',')[0];
    if (!url) return undefined;
    const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
    const v = /^etcd_mvcc_db_total_size_in_bytes (\S+)$/m.exec(text)?.[1];
    return v ? Math.round(Number(v) / 2 ** 20) : undefined;
  } catch {
    return undefined;
  }
}

/** The control plane's processes, by command name (argv[0]'s base name), and this process itself. */
const CONTROL_PLANE = [
  'kube-apiserver',
  'etcd',
  'kube-controller-manager',
  'kube-scheduler',
  'kwok',
] as const;
const CLOCK_TICKS = 100; // USER_HZ: /proc/<pid>/stat counts CPU time in 1/100 s on Linux

/** CPU seconds (user + system) so far of a process, from /proc/<pid>/stat; 0 when it is gone. */
function cpuSecondsOf(pid: number | string): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may contain spaces), from the state (field 3) on.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / CLOCK_TICKS; // utime, stime: fields 14 and 15
  } catch {
    return 0;
  }
}

/**
 * A snapshot of CPU time: each control-plane process's and this process's (the bench and the
 * operator run in it) in seconds, plus the machine's busy and total CPU seconds (/proc/stat).
 */
export interface CpuSnapshot {
  at: number;
  byProcess: Record<string, number>;
  machineBusy: number;
  machineTotal: number;
}

export function cpuSnapshot(): CpuSnapshot {
  const byProcess: Record<string, number> = {};
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    let argv0 = '';
    try {
      argv0 = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0] ?? '';
    } catch {
      continue;
    }
    const name = basename(argv0);
    if ((CONTROL_PLANE as readonly string[]).includes(name))
      byProcess[name] = (byProcess[name] ?? 0) + cpuSecondsOf(pid);
  }
  byProcess['bench+operator'] = cpuSecondsOf(process.pid);
  const [, ...ticks] = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/);
  const t = ticks.map(Number);
  const total = t.reduce((a, b) => a + b, 0);
  const idle = (t[3] ?? 0) + (t[4] ?? 0); // idle + iowait
  return {
    at: Date.now(),
    byProcess,
    machineBusy: (total - idle) / CLOCK_TICKS,
    machineTotal: total / CLOCK_TICKS,
  };
}

/**
 * CPU spent between two snapshots: seconds per process, the rest of the machine (other processes:
 * other engineers' work, kubectl, the kernel), the machine's busy fraction of its cores, and
 * the wall time.
 */
export function cpuBetween(a: CpuSnapshot, b: CpuSnapshot) {
  const seconds = Object.fromEntries(
    Object.keys(b.byProcess).map((k) => [k, +((b.byProcess[k] ?? 0) - (a.byProcess[k] ?? 0)).toFixed(1)]),
  );
  const ours = Object.values(seconds).reduce((s, v) => s + v, 0);
  const busy = b.machineBusy - a.machineBusy;
  return {
    wallSeconds: +((b.at - a.at) / 1000).toFixed(1),
    cpuSeconds: seconds,
    cpuSecondsMeasured: +ours.toFixed(1),
    cpuSecondsRestOfMachine: +(busy - ours).toFixed(1),
    machineBusyFraction: +(busy / (b.machineTotal - a.machineTotal)).toFixed(2),
  };
}
