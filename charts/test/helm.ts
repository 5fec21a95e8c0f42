// Runs the helm binary that charts/scripts/ensure-helm.sh builds from the Go module proxy (cached
// per version). No helm means the tests fail with ensure-helm's own error; they never skip.
import { execFileSync, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { kubeconfigPath } from '@berth/test/cluster/env';

const here = dirname(fileURLToPath(import.meta.url));
export const chartDir = join(here, '..', 'berth');
export const ensureHelmScript = join(here, '..', 'scripts', 'ensure-helm.sh');

let cached: string | undefined;

/** Path to helm; builds it on first use (minutes, once per machine). */
export function helmPath(): string {
  cached ??= execFileSync('bash', [ensureHelmScript], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: 20 * 60_000,
  })
    .trim()
    .split('\n')
    .at(-1);
  if (!cached) throw new Error(`${ensureHelmScript} printed no path`);
  return cached;
}

export interface HelmResult {
  stdout: string;
  stderr: string;
  code: number;
}

/** Runs helm (with the cluster's kubeconfig when `cluster` is set). Never throws on exit codes. */
export function helm(
  args: string[],
  opts: { cluster?: boolean; timeoutMs?: number } = {},
): Promise<HelmResult> {
  const fullArgs = opts.cluster ? ['--kubeconfig', kubeconfigPath(), ...args] : args;
  return new Promise((resolve, reject) => {
    const child = spawn(helmPath(), fullArgs, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 120_000);
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ stdout, stderr, code: code ?? -1 });
    });
  });
}

export async function helmOk(
  args: string[],
  opts: { cluster?: boolean; timeoutMs?: number } = {},
): Promise<string> {
  const r = await helm(args, opts);
  if (r.code !== 0) throw new Error(`helm ${args.join(' ')} exited ${r.code}:\n${r.stderr.trim()}`);
  return r.stdout;
}

/** A database URL for values: the chart requires one and never connects to it at render time. */
export const DB_URL = 'postgresql://berth:secret@postgres.example:5432/berth';

/**
 * The documented profiles, each as helm value arguments. `default` is values.yaml plus the one
 * required value; every profile here is linted, rendered and validated by the API server.
 */
export const profiles: Record<string, string[]> = {
  default: ['--set', `database.url=${DB_URL}`],
  'cpu-only': ['-f', join(chartDir, 'values-cpu-only.yaml'), '--set', `database.url=${DB_URL}`],
  'existing-secrets': [
    '--set',
    'database.existingSecret.name=berth-db',
    '--set',
    'adminToken.existingSecret.name=berth-admin',
    '--set',
    'keyHashSecret.existingSecret.name=berth-keyhash',
  ],
  'everything-on': [
    '--set',
    `database.url=${DB_URL}`,
    '--set',
    'redis.url=redis://redis:6379',
    '--set',
    'api.ingress.enabled=true',
    '--set',
    'api.ingress.className=nginx',
    '--set',
    'api.ingress.hosts[0].host=berth.example.com',
    '--set',
    'serviceMonitor.enabled=true',
    '--set',
    'grafanaDashboard.enabled=true',
    '--set',
    'endpointsNamespace=berth-endpoints',
  ],
};
