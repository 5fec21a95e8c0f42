// What GitOps tools say about an object: kstatus (Flux, kpt, the cli-utils applier) and an Argo CD
// Lua health check, run by the Go programs in this directory (built once by build.sh, cached under
// ~/.cache/berth/tools). No Go means the tests fail with build.sh's own error; they never skip.
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { kubeconfigPath } from '../cluster/env.ts';
import { runTool } from '../support/process.ts';

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = join(here, '..', '..');

/** The health check the chart ships (argocd-cm key resource.customizations.health.berth.dev_DedicatedEndpoint). */
export const ARGOCD_HEALTH_SCRIPT = join(repoRoot, 'charts', 'berth', 'files', 'argocd-health.lua');

let binDir: string | undefined;

/** Directory holding kstatus and argocd-health; builds them on first use (about a minute cold). */
export function gitopsToolsDir(): string {
  binDir ??= execFileSync('bash', [join(here, 'build.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: 15 * 60_000,
  })
    .trim()
    .split('\n')
    .at(-1);
  if (!binDir) throw new Error('test/gitops/build.sh printed no directory');
  return binDir;
}

async function run(tool: string, args: string[], input: string, env: NodeJS.ProcessEnv = process.env) {
  const r = await runTool(join(gitopsToolsDir(), tool), args, { input, env, timeoutMs: 60_000 });
  if (r.code !== 0) throw new Error(`${tool} ${args.join(' ')} exited ${r.code}: ${r.stderr.trim()}`);
  return r.stdout;
}

export type KstatusStatus = 'InProgress' | 'Failed' | 'Current' | 'Terminating' | 'NotFound' | 'Unknown';

export interface KstatusResult {
  status: KstatusStatus;
  message: string;
  conditions: { type: string; status: string; reason?: string; message?: string }[];
}

/** kstatus of an object (as read from the API server, e.g. `kubectl get -o json`). */
export async function kstatus(object: object): Promise<KstatusResult> {
  return JSON.parse(await run('kstatus', ['-'], JSON.stringify(object))) as KstatusResult;
}

/** kstatus of the live object, read by the Go program itself through KUBECONFIG. */
export async function kstatusLive(resource: string, name: string, namespace: string): Promise<KstatusResult> {
  const env = { ...process.env, KUBECONFIG: kubeconfigPath() };
  return JSON.parse(await run('kstatus', ['get', resource, name, '-n', namespace], '', env)) as KstatusResult;
}

export interface ArgoHealth {
  /** Absent when the script returned nil or an empty table (Argo CD: no health for the resource). */
  status?: 'Healthy' | 'Progressing' | 'Degraded' | 'Suspended' | 'Missing' | 'Unknown';
  message?: string;
}

/** The health an Argo CD health script returns for an object; rejects when the script errors. */
export async function argocdHealth(object: object, script = ARGOCD_HEALTH_SCRIPT): Promise<ArgoHealth> {
  return JSON.parse(await run('argocd-health', [script, '-'], JSON.stringify(object))) as ArgoHealth;
}
