// The simulator's start-up stages as replicas on one node live them: five processes starting
// together on one Hugging Face cache download the weights once from the hub (the others wait for
// that download), and a start finds the compile artifacts a previous one left in vLLM's cache.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startEngineSim } from '../src/index.ts';
import { cli } from './helpers.ts';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** A hub that counts GETs of weight files. */
async function countingHub(): Promise<{ url: string; downloads: () => number }> {
  let n = 0;
  const server: Server = createServer((req, res) => {
    if (req.method === 'GET' && /\/resolve\/main\/model\.safetensors$/.test(req.url ?? '')) n++;
    res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(Buffer.alloc(1024));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanup.push(() => new Promise((r) => server.close(r)));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, downloads: () => n };
}

/** One simulator process; resolves with its log once it serves. */
function start(args: string[], env: Record<string, string>): Promise<string> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', cli, '--model', 'org/small', '--host', '127.0.0.1', '--port', '0', ...args],
    { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  cleanup.push(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no start in 30 s:\n${out}`)), 30_000);
    const read = (c: Buffer) => {
      out += c.toString();
      if (out.includes('Application startup complete.')) {
        clearTimeout(timer);
        resolve(out);
      }
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.once('exit', (code) => reject(new Error(`exited with ${code}:\n${out}`)));
  });
}

const temp = () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'sim-startup-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
};

describe('start-up on one node', () => {
  it('five replicas starting together download the weights once; the others wait for it', async () => {
    const hub = await countingHub();
    const env = { HF_HOME: temp(), HF_ENDPOINT: hub.url, VLLM_CACHE_ROOT: temp() };
    const logs = await Promise.all(
      Array.from({ length: 5 }, () => start(['--weights-download-ms', '800'], env)),
    );
    expect(hub.downloads()).toBe(1);
    expect(logs.filter((l) => l.includes('Downloading model weights of org/small'))).toHaveLength(1);
    expect(logs.filter((l) => l.includes('Waiting for another process downloading'))).toHaveLength(4);
    // The next start on the node finds them cached.
    const next = await start(['--weights-download-ms', '800'], env);
    expect(next).toContain('Using model weights cached in');
    expect(hub.downloads()).toBe(1);
  }, 60_000);

  it('compiles on a cold cache, and loads the compiled graph a previous start left', async () => {
    const env = { HF_HOME: temp(), VLLM_CACHE_ROOT: temp() };
    const args = ['--compile-ms', '600', '--compile-cached-ms', '50'];
    const cold = await start(args, env);
    expect(cold).toContain('Compiling a graph for dynamic shape');
    const warm = await start(args, env);
    expect(warm).toContain('Directly load the compiled graph(s) from the cache');
    const seconds = (log: string) => Number(/torch\.compile takes ([\d.]+) s/.exec(log)![1]);
    expect(seconds(cold)).toBeGreaterThanOrEqual(0.6);
    expect(seconds(warm)).toBeLessThan(0.6);
    // Another model on the same cache compiles for itself (--model again: the last one wins, as
    // with vLLM's argparse).
    expect(await start([...args, '--model', 'org/other'], env)).toContain(
      'Compiling a graph for dynamic shape',
    );
  }, 60_000);
});

describe('start-up on two nodes in one process', () => {
  it('each simulator reads the caches of the environment it was given: one download per node', async () => {
    const hub = await countingHub();
    const node = () => ({ HF_HOME: temp(), HF_ENDPOINT: hub.url, VLLM_CACHE_ROOT: temp() });
    const [a, b] = [node(), node()];
    const sim = async (env: Record<string, string>) => {
      const lines: string[] = [];
      const s = await startEngineSim({
        model: 'org/small',
        weightsDownloadMs: 300,
        env,
        log: (l) => lines.push(l),
      });
      cleanup.push(() => s.close(0));
      return lines.join('\n');
    };
    const logs = await Promise.all([sim(a), sim(a), sim(b), sim(b)]);
    expect(hub.downloads()).toBe(2);
    expect(
      logs.filter((l) => l.includes(`Downloading model weights of org/small to ${a.HF_HOME}`)),
    ).toHaveLength(1);
    expect(
      logs.filter((l) => l.includes(`Downloading model weights of org/small to ${b.HF_HOME}`)),
    ).toHaveLength(1);
    // Neither is this process's own cache.
    expect(process.env.HF_HOME).not.toBe(a.HF_HOME);
    expect(await sim(b)).toContain(`Using model weights cached in ${b.HF_HOME}`);
    expect(hub.downloads()).toBe(2);
  }, 30_000);
});
