// The README's quick start, run as written: `npm start` as a real process from a clean data
// directory (no DATABASE_URL, no KUBECONFIG: local mode with the embedded database), then every
// block marked `<!-- quickstart -->` in one bash session, in order, as a user pastes them into a
// second terminal. The one change made to the documented text: `localhost:8080` becomes the free
// port the test chose. `<!-- quickstart: server -->` marks the block that starts the API (its
// `npm install` is what CI already did); `<!-- quickstart: <file> -->` marks a file to save.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '@berth/operator/local';
import { eventually } from '../support/eventually.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

interface Block {
  name?: string;
  lang: string;
  code: string;
}

/** The fenced blocks preceded by a `<!-- quickstart… -->` marker, in document order. */
export function quickstartBlocks(markdown: string): Block[] {
  const re = /<!-- quickstart(?::\s*([^\s]+))?\s*-->\s*\n\s*```(\w+)\n([\s\S]*?)\n```/g;
  return [...markdown.matchAll(re)].map((m) => ({
    ...(m[1] ? { name: m[1] } : {}),
    lang: m[2]!,
    code: m[3]!,
  }));
}

/** The environment of a new terminal: nothing that would select another database or runtime. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(KUBECONFIG|KUBERNETES_|DATABASE_URL|ADMIN_TOKEN|PORT|HOST|BERTH_|HF_|VITEST|npm_)/.test(k))
      continue;
    env[k] = v;
  }
  // The Node 24 running the tests is the one on PATH (node, npm).
  env.PATH = `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH ?? ''}`;
  return { ...env, ...extra };
}

/**
 * One bash session: blocks run in it keep their variables and functions. Assertions look at stdout,
 * what lands in a terminal (curl's progress meter goes to stderr, and only when stdout is not one).
 */
class Shell {
  private out = '';
  err = '';
  private readonly child: ChildProcess;
  constructor(cwd: string, env: NodeJS.ProcessEnv) {
    this.child = spawn('bash', ['--noprofile', '--norc'], { cwd, env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stdout!.on('data', (d: Buffer) => (this.out += d.toString()));
    this.child.stderr!.on('data', (d: Buffer) => (this.err += d.toString()));
  }

  async run(code: string, timeoutMs: number): Promise<{ output: string; status: number }> {
    const marker = `__quickstart_done_${Math.random().toString(36).slice(2)}__`;
    const start = this.out.length;
    this.child.stdin!.write(`${code}\nprintf '\\n${marker} %s\\n' "$?"\n`);
    const done = await eventually(
      () => {
        const m = new RegExp(`\\n${marker} (\\d+)\\n`).exec(this.out.slice(start));
        return m ?? false;
      },
      {
        timeout: timeoutMs,
        interval: 100,
        description: `block to finish:\n${code}\n--- output so far:\n${this.out.slice(start)}`,
      },
    );
    return { output: this.out.slice(start, start + done.index), status: Number(done[1]) };
  }

  close() {
    this.child.stdin!.end();
    this.child.kill('SIGTERM');
  }
}

const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
const blocks = quickstartBlocks(readme);
let port: number;
let work: string;
let api: ChildProcess;
let apiOutput = '';
let shell: Shell;
let apiExit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

const documented = (b: Block) => b.code.replaceAll('localhost:8080', `localhost:${port}`);

beforeAll(async () => {
  port = await freePort();
  work = mkdtempSync(path.join(tmpdir(), 'berth-quickstart-'));
  // `chat.mjs` imports `openai` as it would inside this repository.
  symlinkSync(path.join(root, 'node_modules'), path.join(work, 'node_modules'));
  const server = blocks.find((b) => b.name === 'server');
  expect(server?.code.split('\n').some((l) => /^npm start\b/.test(l))).toBe(true);
  api = spawn('npm', ['start'], {
    cwd: root,
    env: cleanEnv({ PORT: String(port), BERTH_DATA_DIR: path.join(work, '.data') }),
    // Its own process group, like a terminal's foreground job: the test stops it as Ctrl-C would.
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  api.stdout!.on('data', (d: Buffer) => (apiOutput += d.toString()));
  api.stderr!.on('data', (d: Buffer) => (apiOutput += d.toString()));
  apiExit = new Promise((resolve) => api.once('exit', (code, signal) => resolve({ code, signal })));
  await eventually(
    async () => {
      if (api.exitCode !== null) throw new Error(`npm start exited with ${api.exitCode}:\n${apiOutput}`);
      return (await fetch(`http://127.0.0.1:${port}/readyz`)).ok;
    },
    { timeout: 60_000, interval: 200, description: 'npm start to answer /readyz' },
  );
  shell = new Shell(work, cleanEnv({}));
}, 90_000);

afterAll(async () => {
  shell?.close();
  if (api && api.exitCode === null && api.signalCode === null) {
    try {
      process.kill(-api.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('README quick start, verbatim, from a clean data directory', () => {
  it('documents the steps this test runs', () => {
    expect(blocks.map((b) => b.name ?? b.lang)).toEqual([
      'server',
      'sh',
      'sh',
      'sh',
      'chat.mjs',
      'sh',
      'sh',
      'sh',
      'elastic.mjs',
      'sh',
    ]);
    expect(blocks.filter((b) => b.code.includes('localhost:8080')).length).toBeGreaterThanOrEqual(5);
  });

  // Each step: the block's text identifies it, and the assertions are on what the user sees.
  const steps: Array<[string, (output: string) => void]> = [
    [
      'creates an account and a global key',
      (out) => expect(out).toMatch(/^acct_\w+ svc_live_[A-Za-z0-9]{33}$/m),
    ],
    [
      'creates an endpoint and waits until it is up',
      (out) => {
        const e = JSON.parse(out.trim().split('\n').at(-1)!);
        expect(e).toMatchObject({ status: 'up', label: 'ONLINE', readyReplicas: 1 });
        expect(e.baseUrl).toBe(`http://localhost:${port}/api/d/${e.id}`);
      },
    ],
    [
      'streams a chat completion with curl',
      (out) => {
        const events = out.split('\n\n').filter((s) => s.startsWith('data: '));
        expect(events.length).toBeGreaterThan(2);
        expect(JSON.parse(events[0]!.slice(6))).toMatchObject({ object: 'chat.completion.chunk' });
        expect(out.trimEnd().endsWith('data: [DONE]')).toBe(true);
      },
    ],
    ['streams a chat completion with the OpenAI SDK', (out) => expect(out.trim()).toMatch(/\w+/)],
    [
      'sleeps when idle and wakes on the next request',
      (out) => {
        const lines = out.trim().split('\n');
        expect(lines[0]).toBe('hibernated');
        expect(lines[1]).toMatch(/^HTTP 200 after [\d.]+ s$/);
        expect(lines[2]).toBe('up');
        expect(out).toMatch(/event Normal IdleTimeout: No traffic for 15s/);
        expect(out).toMatch(/event Normal WakeRequested/);
      },
    ],
    [
      'fills the Elastic catalog with a platform account’s endpoint',
      (out) => expect(out.trim().split('\n')).toEqual(['qwen-small', 'qwen-small']),
    ],
    [
      'calls the catalog model with the OpenAI SDK, paid by a free query',
      (out) => {
        const [answer, balance] = out.trim().split('\n');
        expect(answer).toMatch(/^qwen-small: \S/);
        expect(JSON.parse(balance!)).toMatchObject({
          balance: '0.000000',
          currency: 'USD',
          paid: false,
          freeQueriesRemaining: 19,
        });
      },
    ],
  ];

  it('runs every documented command in order', async () => {
    const runnable = blocks.filter((b) => b.name !== 'server');
    let step = 0;
    for (const b of runnable) {
      if (b.name) {
        writeFileSync(path.join(work, b.name), documented(b));
        continue;
      }
      const errBefore = shell.err.length;
      const { output, status } = await shell.run(documented(b), 60_000);
      const stderr = shell.err.slice(errBefore);
      const [title, check] = steps[step++]!;
      expect(
        status,
        `${title}: exit status\n${output}\n--- stderr:\n${stderr}\n--- API:\n${apiOutput.slice(-4000)}`,
      ).toBe(0);
      try {
        check(output);
      } catch (err) {
        throw new Error(
          `${title}: ${(err as Error).message}\n--- output:\n${output}\n--- stderr:\n${stderr}`,
          {
            cause: err,
          },
        );
      }
    }
    expect(step).toBe(steps.length);
  }, 150_000);

  it('signs in to the dashboard at http://localhost:<port>/ with npm start’s defaults', async () => {
    const browser = await chromium.launch({
      executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    try {
      const page = await browser.newPage();
      page.setDefaultTimeout(15_000);
      const base = `http://localhost:${port}`;
      await page.goto(base + '/');
      await page.getByRole('link', { name: /^Sign in with Development identity provider/ }).click();
      await page.waitForURL(/\/idp\//);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForURL(`${base}/endpoints`);
      const notice = page.getByRole('region', { name: 'Welcome to Berth: your API key' });
      expect(await notice.getByLabel('Your new API key').inputValue()).toMatch(/^svc_live_/);
    } finally {
      await browser.close();
    }
    // The provider's issuer is an address the server bound, never the unset HOST.
    expect(apiOutput).not.toContain('undefined');
    expect(apiOutput).not.toMatch(/"level":(50|60)/);
  }, 60_000);

  it('stops cleanly: the API drains and no engine process outlives it', async () => {
    const logs = path.join(work, '.data', 'logs');
    const files = readdirSync(logs).filter((f) => f.endsWith('.log'));
    expect(files).toHaveLength(2); // the quick start's endpoint and the catalog's
    const pids = files
      .flatMap((f) => [...readFileSync(path.join(logs, f), 'utf8').matchAll(/starting \(pid (\d+)/g)])
      .map((m) => Number(m[1]));
    expect(pids.length).toBeGreaterThanOrEqual(3); // two first starts and the wake
    process.kill(-api.pid!, 'SIGINT'); // Ctrl-C in the terminal
    const exit = await apiExit;
    // npm re-raises the SIGINT its script got; the API itself logs a clean stop.
    expect(exit.code === 0 || exit.signal === 'SIGINT', JSON.stringify(exit)).toBe(true);
    for (const pid of pids) expect(alive(pid), `engine pid ${pid}`).toBe(false);
    expect(apiOutput).toMatch(/Berth API stopped/);
  }, 60_000);
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
