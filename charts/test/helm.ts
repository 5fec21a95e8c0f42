// Runs the helm binary that charts/scripts/ensure-helm.sh builds from the Go module proxy (cached
// per version). No helm means the tests fail with ensure-helm's own error; they never skip.
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { kubeconfigPath } from '@berth/test/cluster/env';
import { runTool, type ToolResult } from '@berth/test/support/process';

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

export type HelmResult = ToolResult;

/** Runs helm (with the cluster's kubeconfig when `cluster` is set). Never throws on exit codes. */
export function helm(
  args: string[],
  opts: { cluster?: boolean; timeoutMs?: number } = {},
): Promise<HelmResult> {
  const fullArgs = opts.cluster ? ['--kubeconfig', kubeconfigPath(), ...args] : args;
  return runTool(helmPath(), fullArgs, { timeoutMs: opts.timeoutMs });
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

export const cpuOnlyValues = join(chartDir, 'values-cpu-only.yaml');

/**
 * The documented profiles, each as helm value arguments. `default` is values.yaml plus the one
 * required value; `cpu-only` is the one-command try-out (bundled PostgreSQL). Every profile here is
 * linted, rendered and validated by the API server.
 */
export const profiles: Record<string, string[]> = {
  default: ['--set', `database.url=${DB_URL}`],
  'cpu-only': ['-f', cpuOnlyValues],
  'cpu-only-external-db': [
    '-f',
    cpuOnlyValues,
    '--set',
    'database.bundled.enabled=false',
    '--set',
    `database.url=${DB_URL}`,
  ],
  'bundled-db-retained': [
    '--set',
    'database.bundled.enabled=true',
    '--set',
    'database.bundled.persistence.onUninstall=Retain',
    '--set',
    'database.bundled.persistence.storageClass=standard',
    '--set',
    'database.bundled.password=0123456789abcdef-_.~',
  ],
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
    'enginePrepull.enabled=true',
    '--set',
    'operator.inferencePools.enabled=true',
    '--set',
    'operator.engineTracing.endpoint=http://otel-collector.observability:4317',
    '--set',
    'endpointsNamespace=berth-endpoints',
  ],
};
