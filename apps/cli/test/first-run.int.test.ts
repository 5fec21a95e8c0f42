// `npx berth` right after `npm install`, with no build step: the CLI's workspace builds dist/berth.mjs
// in its `prepare` script, which npm runs for a workspace before it links the workspace's bins (a
// root `postinstall` runs after the linking, too late: npm skips a bin whose file is missing). Checked
// at the repository root, and on a fresh install of the CLI's workspace in an empty directory.
import { spawn } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const cliDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const root = path.resolve(cliDir, '../..');
const { version } = JSON.parse(readFileSync(path.join(cliDir, 'package.json'), 'utf8')) as {
  version: string;
};
const scratch = mkdtempSync(path.join(tmpdir(), 'berth-first-run-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function run(command: string, args: string[], cwd: string, env: Record<string, string> = {}) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(command, args, { cwd, env: { ...process.env, NO_COLOR: '1', ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

// What a user types. Without a terminal npx would install a registry package named `berth` when no
// local one is linked: here it may not (yes=false) and does not ask the registry (offline).
const npxBerth = (cwd: string, ...args: string[]) =>
  run('npx', ['berth', ...args], cwd, { npm_config_yes: 'false', npm_config_offline: 'true' });

describe('npx berth after npm install', () => {
  it('at the repository root: --version prints the version of @berth/cli (exit 0)', async () => {
    const res = await npxBerth(root, '--version');
    expect(res.stderr, 'run `npm install` at the repository root first').toBe('');
    expect(res.stdout).toBe(`${version}\n`);
    expect(res.code).toBe(0);
  });

  it('on a fresh install (no dist yet): npm install links berth, and it runs', async () => {
    const copy = path.join(scratch, 'apps/cli');
    for (const f of ['package.json', 'build.mjs', 'src'])
      cpSync(path.join(cliDir, f), path.join(copy, f), { recursive: true });
    writeFileSync(
      path.join(scratch, 'package.json'),
      JSON.stringify({ name: 'fresh', private: true, workspaces: ['apps/cli'] }),
    );
    const install = await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund'], scratch);
    expect(install.code, install.stderr).toBe(0);

    const res = await npxBerth(scratch, '--version');
    expect(res.stdout).toBe(`${version}\n`);
    expect(res.code).toBe(0);
    const help = await npxBerth(scratch, 'hardware', '--help');
    expect(help.stdout).toMatch(/^Usage: berth hardware \[options\] \[command\]/);
  }, 120_000);
});
