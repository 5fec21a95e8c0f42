// What tests need to reach the Kubernetes cluster: its kubeconfig (from KUBECONFIG, which
// global-setup.ts sets when it starts the local cluster), the kubectl binary and a kubectl runner.
// Nothing here skips: no cluster means the test fails with a message saying how to get one.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { KubeConfig } from '@kubernetes/client-node';

const here = dirname(fileURLToPath(import.meta.url));

/** The Kubernetes release the local cluster is built from (single source: lib.sh). */
export const k8sVersion: string = (() => {
  const match = /^K8S_VERSION=(\S+)$/m.exec(readFileSync(join(here, 'lib.sh'), 'utf8'));
  if (!match?.[1]) throw new Error('K8S_VERSION not found in test/cluster/lib.sh');
  return match[1];
})();

/** Where cluster:up caches the binaries it builds. */
export const cacheBinDir = join(
  process.env.XDG_CACHE_HOME || join(homedir(), '.cache'),
  'berth',
  'k8s',
  k8sVersion,
  'bin',
);

/** The kubeconfig cluster:up writes for the local cluster (BERTH_CLUSTER_DIR overrides the state dir). */
export const localKubeconfig = join(
  process.env.BERTH_CLUSTER_DIR ||
    join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'berth', 'cluster'),
  'kubeconfig',
);

/**
 * True when the tests run against the local cluster of cluster:up rather than one the user brought
 * (kind, a real cluster). Only the local cluster promises loopback pod IPs (127.16.0.0/16).
 */
export function isLocalCluster(): boolean {
  return process.env.KUBECONFIG === localKubeconfig;
}

/** KUBECONFIG of the cluster under test (a file, or several joined by ':'). Throws when unset. */
export function kubeconfigPath(): string {
  const path = process.env.KUBECONFIG;
  if (!path) {
    throw new Error(
      'KUBECONFIG is not set: run `eval "$(npm run -s cluster:up | tail -n 1)"` or let the integration ' +
        "project's globalSetup (test/cluster/global-setup.ts) start the local cluster",
    );
  }
  return path;
}

/** kubectl: the one cluster:up built, else KUBEBUILDER_ASSETS', else whatever is on PATH. */
export function kubectlPath(): string {
  const candidates = [join(cacheBinDir, 'kubectl')];
  if (process.env.KUBEBUILDER_ASSETS) candidates.push(join(process.env.KUBEBUILDER_ASSETS, 'kubectl'));
  return candidates.find((p) => existsSync(p)) ?? 'kubectl';
}

export interface KubectlOptions {
  /** Written to kubectl's stdin (e.g. a manifest for `apply -f -`). */
  input?: string;
  /** Adds `--namespace <ns>`. */
  namespace?: string;
  /** Kills kubectl after this many milliseconds (default 30 000). */
  timeoutMs?: number;
}

export interface KubectlResult {
  stdout: string;
  stderr: string;
  /** Exit code; -1 when kubectl was killed on timeout. */
  code: number;
}

/** Runs kubectl against the cluster under test. Never throws on a non-zero exit; check `code`. */
export function kubectl(args: string[], opts: KubectlOptions = {}): Promise<KubectlResult> {
  const fullArgs = [...(opts.namespace ? ['--namespace', opts.namespace] : []), ...args];
  // Through the environment, not --kubeconfig: KUBECONFIG may list several files.
  const env = { ...process.env, KUBECONFIG: kubeconfigPath() };
  return new Promise((resolve, reject) => {
    const child = spawn(kubectlPath(), fullArgs, { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, opts.timeoutMs ?? 30_000);
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${kubectlPath()}: ${err.message}`, { cause: err }));
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({
        stdout,
        stderr: timedOut ? `${stderr}\n(kubectl timed out)` : stderr,
        code: timedOut ? -1 : (code ?? -1),
      });
    });
    child.stdin.end(opts.input ?? '');
  });
}

/** Runs kubectl and throws (with its stderr) unless it exits 0; returns stdout. */
export async function kubectlOk(args: string[], opts: KubectlOptions = {}): Promise<string> {
  const r = await kubectl(args, opts);
  if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')} exited ${r.code}: ${r.stderr.trim()}`);
  return r.stdout;
}

/** Runs kubectl with `-o json` and parses the output. */
export async function kubectlJson<T = unknown>(args: string[], opts: KubectlOptions = {}): Promise<T> {
  return JSON.parse(await kubectlOk([...args, '-o', 'json'], opts)) as T;
}

/** A KubeConfig for @kubernetes/client-node, loaded from the same kubeconfig. */
export function loadKubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kubeconfigPath(); // throws when KUBECONFIG is unset
  kc.loadFromDefault(); // reads KUBECONFIG, merging several files as kubectl does
  return kc;
}

/**
 * Creates a uniquely named namespace for one test; `remove()` deletes it (and everything in it)
 * without waiting for finalization.
 */
/**
 * Deletes every DedicatedEndpoint of a namespace and waits up to a minute for them to go (their
 * finalizers run while the operator and the API still do): a teardown's first step, errors ignored.
 */
export async function deleteEndpoints(namespace: string): Promise<void> {
  await kubectlOk([
    'delete',
    'dedicatedendpoints',
    '--all',
    '-n',
    namespace,
    '--wait=true',
    '--timeout=60s',
  ]).catch(() => {});
}

export async function testNamespace(prefix: string): Promise<{ name: string; remove: () => Promise<void> }> {
  const name = `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
  await kubectlOk(['create', 'namespace', name]);
  return {
    name,
    remove: async () => {
      await kubectlOk(['delete', 'namespace', name, '--wait=false', '--ignore-not-found']);
    },
  };
}
