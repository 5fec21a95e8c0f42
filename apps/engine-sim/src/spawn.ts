// Runs the simulator's CLI as its own process (benchmarks keep its CPU apart from theirs) and
// resolves once it serves, with the URL it printed.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export interface SpawnedEngineSim {
  child: ChildProcess;
  url: string;
  /** SIGTERM, then wait (at most 5 s) for the exit. */
  stop(): Promise<void>;
}

const cli = fileURLToPath(new URL('./main.ts', import.meta.url));

export async function spawnEngineSim(args: readonly string[], timeoutMs = 30_000): Promise<SpawnedEngineSim> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', cli, '--model', 'bench', '--host', '127.0.0.1', '--port', '0', ...args],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(
      () => reject(new Error(`simulator did not start in ${timeoutMs} ms`)),
      timeoutMs,
    );
    child.stdout!.setEncoding('utf8').on('data', (c: string) => {
      out += c;
      const m = /Starting vLLM API server 0 on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m && out.includes('Application startup complete.')) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`simulator exited with ${code}`));
    });
  });
  // Keep draining its output so the child never blocks on a full pipe.
  child.stdout!.removeAllListeners('data').resume();
  return {
    child,
    url,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
    },
  };
}
