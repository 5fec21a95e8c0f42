// The built `berth` binary (dist/berth.mjs) against a local-mode API (real PostgreSQL, engine
// simulator processes, the operator's pre-start checks against a fake hub): login and profiles,
// apply -f (twice, --dry-run, --prune), create with progress, chat streaming, logs, a failed
// endpoint's exit code and message, JSON/YAML output, a compute key refused on `keys create`.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { startTestApi, type TestApi } from '@berth/test/support/api';
import { startFakeHub } from '@berth/test/support/fake-hub';

const cliDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const bin = path.join(cliDir, 'dist/berth.mjs');
let api: TestApi;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let tmp: string;
let acct: Awaited<ReturnType<TestApi['newAccount']>>;

beforeAll(async () => {
  execFileSync(process.execPath, [path.join(cliDir, 'build.mjs')]);
  hub = await startFakeHub();
  tmp = mkdtempSync(path.join(tmpdir(), 'berth-cli-'));
  api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: path.join(tmp, 'data'),
    BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 5 --startup-delay-ms 1500',
    HF_ENDPOINT: hub.url,
  });
  acct = await api.newAccount();
}, 60_000);

afterAll(async () => {
  await api?.stop();
  await hub?.close();
  await api?.db.drop();
  rmSync(tmp, { recursive: true, force: true });
});

/** Runs the binary (no terminal: plain progress lines, no colours); the config lives in tmp. */
function berth(args: string[], env: Record<string, string> = {}, input?: string) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(bin, args, {
      env: { PATH: process.env.PATH ?? '', BERTH_CONFIG_DIR: path.join(tmp, 'config'), ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    child.stdin.end(input ?? '');
  });
}

const manifest = (docs: { id: string; idle?: number }[]) =>
  docs
    .map(
      (d) => `apiVersion: berth.dev/v1alpha1
kind: DedicatedEndpoint
metadata:
  name: ${d.id}
spec:
  model:
    id: org/small
  hardware:
    gpuType: nvidia-l4-24gb
    gpuCount: 1
  scaling:
    idleTimeoutSeconds: ${d.idle ?? 60}
`,
    )
    .join('---\n');

describe('berth', () => {
  it('login stores the profile with mode 0600; whoami -o json names the account and key', async () => {
    const login = await berth(['login', '--url', api.url], {}, `${acct.global}\n`);
    expect(login.stderr).toMatch(
      /^Logged in to http:\/\/127\.0\.0\.1:\d+ as account acct_\S+ \(key svc_live_\S+…, scope global\); profile "default" saved in /,
    );
    expect(login.code).toBe(0);
    const file = path.join(tmp, 'config', 'config.json');
    expect(statSync(file).mode & 0o777).toBe(0o600);

    const who = await berth(['whoami', '-o', 'json']);
    expect(who.code).toBe(0);
    expect(JSON.parse(who.stdout)).toMatchObject({
      object: 'whoami',
      account: { id: acct.id },
      key: { scope: 'global' },
    });

    const bad = await berth(['whoami'], { BERTH_API_KEY: 'svc_live_' + 'x'.repeat(33) });
    expect(bad.code).toBe(4);
    expect(bad.stderr).toBe('error: Invalid API key\n');
  });

  it('apply -f: creates, then nothing the second time; --dry-run shows a plan and changes nothing; --prune removes what is not listed', async () => {
    const file = path.join(tmp, 'endpoints.yaml');
    writeFileSync(file, manifest([{ id: 'endpt-cli-a' }, { id: 'endpt-cli-b' }]));
    const first = await berth(['apply', '-f', file]);
    expect(first.code).toBe(0);
    expect(first.stdout).toBe(
      'dedicatedendpoint/endpt-cli-a created\ndedicatedendpoint/endpt-cli-b created\n',
    );
    const second = await berth(['apply', '-f', file]);
    expect(second.stdout).toBe(
      'dedicatedendpoint/endpt-cli-a unchanged\ndedicatedendpoint/endpt-cli-b unchanged\n',
    );

    writeFileSync(file, manifest([{ id: 'endpt-cli-a', idle: 120 }]));
    const dry = await berth(['apply', '-f', file, '--dry-run']);
    expect(dry.stdout).toBe(
      'dedicatedendpoint/endpt-cli-a would be configured (dry run)\n' +
        '  scaling.idleTimeoutSeconds: 60 → 120\n' +
        'endpt-cli-b not in ' +
        file +
        ': kept (--prune deletes it)\n',
    );
    const after = JSON.parse((await berth(['endpoints', 'get', 'endpt-cli-a', '-o', 'json'])).stdout);
    expect(after).toMatchObject({ generation: 1, scaling: { idleTimeoutSeconds: 60 } });

    const pruned = await berth(['apply', '-f', file, '--prune', '-o', 'json']);
    expect(pruned.code).toBe(0);
    expect(pruned.stdout).toMatch(
      /^dedicatedendpoint\/endpt-cli-a configured\n  scaling\.idleTimeoutSeconds: 60 → 120\ndedicatedendpoint\/endpt-cli-b deleted \(pruned\)\n/,
    );
    const list = parseYaml((await berth(['endpoints', 'list', '-o', 'yaml'])).stdout) as { id: string }[];
    expect(list.map((e) => e.id)).toEqual(['endpt-cli-a']);

    const broken = path.join(tmp, 'broken.yaml');
    writeFileSync(broken, 'apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n');
    const refused = await berth(['apply', '-f', broken]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toBe(
      `error: ${broken}: document 1: expected apiVersion berth.dev/v1alpha1, kind DedicatedEndpoint\n`,
    );
  }, 60_000);

  it('endpoints create follows the phases to ONLINE; chat streams; logs show the engine', async () => {
    const created = await berth([
      'endpoints',
      'create',
      '--model',
      'org/small',
      '--gpu-type',
      'nvidia-l4-24gb',
      '--id',
      'endpt-cli-chat',
      '-o',
      'json',
    ]);
    expect(created.code).toBe(0);
    const lines = created.stderr.trim().split('\n');
    expect(lines[0]).toMatch(/^endpt-cli-chat: PROVISIONING \(\w+\) \d+s$/);
    expect(lines.at(-1)).toMatch(/^✓ endpt-cli-chat: ONLINE after \d+s$/);
    expect(JSON.parse(created.stdout)).toMatchObject({ id: 'endpt-cli-chat', status: 'up' });

    const chat = await berth(['chat', 'endpt-cli-chat', 'Hello there', '--max-tokens', '8'], {
      BERTH_API_KEY: acct.inference,
    });
    expect(chat.code).toBe(0);
    expect(chat.stdout.trim().length).toBeGreaterThan(0);

    const logs = await berth(['endpoints', 'logs', 'endpt-cli-chat']);
    expect(logs.code).toBe(0);
    expect(logs.stdout).toMatch(/^# phase: up/m);
  }, 60_000);

  it('a failed endpoint: exit 3 with the reason and the last log lines', async () => {
    const res = await berth(['endpoints', 'create', '--model', 'org/huge', '--gpu-type', 'nvidia-l4-24gb']);
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/^error: endpt-\S+ failed: ModelTooLarge: Model org\/huge needs about/m);
    expect(res.stderr).toContain('Last log lines:');
    expect(res.stderr).not.toMatch(/\n\s+at /);
  }, 60_000);

  it('a compute key is refused on keys create, with the API’s message (exit 4)', async () => {
    const res = await berth(['keys', 'create', 'ci'], { BERTH_API_KEY: acct.compute });
    expect(res.code).toBe(4);
    expect(res.stderr).toBe(
      'error: This API key has scope "compute"; this route needs a key with scope "global"\n',
    );
    expect(res.stdout).toBe('');
  });

  it('completion prints a bash script naming the commands', async () => {
    const res = await berth(['completion', 'bash']);
    expect(res.stdout).toContain('complete -F _berth berth');
    expect(res.stdout).toContain(
      'endpoints) COMPREPLY=( $(compgen -W "list get create wake wait delete logs"',
    );
  });
});
