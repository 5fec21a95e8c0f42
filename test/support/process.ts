// Runs a command-line tool to completion for tests (helm, the GitOps status tools): stdin from a
// string, stdout and stderr collected, killed after a deadline. Never throws on an exit code.
import { spawn } from 'node:child_process';

export interface ToolResult {
  stdout: string;
  stderr: string;
  /** Exit code; -1 when killed at the deadline. */
  code: number;
}

export function runTool(
  bin: string,
  args: string[],
  opts: { input?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; cwd?: string } = {},
): Promise<ToolResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, {
      env: opts.env ?? process.env,
      cwd: opts.cwd,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
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
    child.stdin.end(opts.input ?? '');
  });
}
