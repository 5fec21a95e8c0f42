// vitest globalSetup for the `integration` project: makes sure a Kubernetes cluster is reachable
// through KUBECONFIG before any test worker starts.
//
// - KUBECONFIG already set (CI ran cluster:up, or kind, or a real cluster): used as is.
// - Otherwise runs cluster:up (building the binaries on first use), sets process.env.KUBECONFIG —
//   workers are started after globalSetup and inherit it — and also provides it as
//   inject('kubeconfig'). At teardown it runs cluster:down, but only if it started the cluster.
import { spawn } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { localKubeconfig } from './env.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    kubeconfig: string;
  }
}

const here = dirname(fileURLToPath(import.meta.url));

function run(script: string): Promise<string> {
  return new Promise((resolve, reject) => {
    // stderr carries the progress (a cold build takes a while); stdout ends with the export line.
    const child = spawn('bash', [join(here, script)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 ? resolve(stdout) : reject(new Error(`test/cluster/${script} exited with code ${code}`)),
    );
  });
}

function mtime(path: string): number | undefined {
  return existsSync(path) ? statSync(path).mtimeMs : undefined;
}

export default async function setup(project: TestProject): Promise<(() => Promise<void>) | void> {
  const preset = process.env.KUBECONFIG;
  if (preset) {
    project.provide('kubeconfig', preset);
    return;
  }

  const before = mtime(localKubeconfig);

  const lastLine = (await run('up.sh')).trim().split('\n').at(-1) ?? '';
  const match = /^export KUBECONFIG=(.+)$/.exec(lastLine);
  if (!match?.[1])
    throw new Error(`cluster:up did not print an export line (got: ${JSON.stringify(lastLine)})`);
  const kubeconfig = match[1];
  process.env.KUBECONFIG = kubeconfig;
  project.provide('kubeconfig', kubeconfig);

  // up.sh rewrites the kubeconfig only when it starts a cluster; a reused one is left running.
  const startedHere = mtime(localKubeconfig) !== before;
  if (!startedHere) return;
  return async () => {
    await run('down.sh');
  };
}
