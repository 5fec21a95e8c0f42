// The built `berth` binary (dist/berth.mjs) against a local-mode API (real PostgreSQL, engine
// simulator processes, the operator's pre-start checks against a fake hub): login and profiles,
// apply -f (twice, --dry-run, --prune), create with progress, chat streaming, logs, a failed
// endpoint's exit code and message, JSON/YAML output, a compute key refused on `keys create`; then
// the first day's commands (issue 30): --version, hardware prices, pinned keys, chat on a catalog
// model, tools, Olympus, Chronos, billing tables.
import { execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
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
    expect(first.code, first.stderr).toBe(0);
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
    // The first poll may come before the operator's first pass has given the phase a reason.
    expect(lines[0]).toMatch(/^endpt-cli-chat: PROVISIONING( \(\w+\))? \d+s$/);
    for (const line of lines.slice(1, -1))
      expect(line).toMatch(/^endpt-cli-chat: (PROVISIONING|ONLINE) \(\w+\) \d+s$/);
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

  it('endpoints wake follows a sleeping endpoint stage by stage to ONLINE, then prints the receipt', async () => {
    const file = path.join(tmp, 'sleepy.yaml');
    writeFileSync(file, manifest([{ id: 'endpt-cli-wake', idle: 15 }]));
    expect((await berth(['apply', '-f', file])).code).toBe(0);
    // scaling.maxHeldRequests is applied (and planned) like the other scaling fields.
    writeFileSync(file, manifest([{ id: 'endpt-cli-wake', idle: 15 }]) + '    maxHeldRequests: 4\n');
    expect((await berth(['apply', '-f', file])).stdout).toMatch(
      /^dedicatedendpoint\/endpt-cli-wake configured\n {2}scaling\.maxHeldRequests: 256 → 4\n/,
    );
    const status = async () =>
      JSON.parse((await berth(['endpoints', 'get', 'endpt-cli-wake', '-o', 'json'])).stdout).status;
    await eventually(async () => (await status()) === 'hibernated', { timeout: 60_000, interval: 500 });

    const woken = await berth(['endpoints', 'wake', 'endpt-cli-wake', '-o', 'json']);
    expect(woken.code).toBe(0);
    const lines = woken.stderr.trim().split('\n');
    // One line per stage (the engine takes 1.5 s to load here), each with the wake's age.
    expect(
      lines.some((l) =>
        /^endpt-cli-wake: WAKING UP \(Loading the model on \S+, a node that has it cached\) \d+s$/.test(l),
      ),
    ).toBe(true);
    expect(lines[0]).toMatch(/^endpt-cli-wake: WAKING UP \(.+\) \d+s$/);
    expect(lines.at(-2)).toMatch(/^✓ endpt-cli-wake: ONLINE after \d+s$/);
    expect(lines.at(-1)).toMatch(
      /^  woke in \d+\.\d s on \S+ \(warm node\): signal \d+ ms · node \d+ ms · image \d+ ms · engine \d\.\d s$/,
    );
    expect(JSON.parse(woken.stdout)).toMatchObject({ status: 'up', scaling: { maxHeldRequests: 4 } });
  }, 90_000);

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

describe('berth, the first day', () => {
  const { version } = JSON.parse(readFileSync(path.join(cliDir, 'package.json'), 'utf8')) as {
    version: string;
  };
  const lines = (text: string) => text.trimEnd().split('\n');

  it('--version and -V print the version of @berth/cli', async () => {
    for (const flag of ['--version', '-V']) {
      const res = await berth([flag]);
      expect(res).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
    }
  });

  it('hardware list shows the price per GPU-hour the API invoices at, with the currency', async () => {
    const res = await berth(['hardware', 'list']);
    expect(res.code).toBe(0);
    expect(res.stdout).toBe(
      'ID                GPU               GIB  COUNTS   PRICE/GPU-HOUR  AVAILABLE\n' +
        'nvidia-h100-80gb  NVIDIA H100 80GB  80   1,2,4,8  2.50 USD        yes\n' +
        'nvidia-a100-80gb  NVIDIA A100 80GB  80   1,2,4,8  1.60 USD        yes\n' +
        'nvidia-l4-24gb    NVIDIA L4 24GB    24   1,2,4    0.80 USD        yes\n',
    );
    const json = JSON.parse((await berth(['hardware', 'list', '-o', 'json'])).stdout) as Record<
      string,
      unknown
    >[];
    expect(json.find((h) => h.id === 'nvidia-l4-24gb')).toMatchObject({
      pricePerGpuHour: '0.800000',
      currency: 'USD',
    });
  });

  it('keys create --pinned-model and --tool-pin (comma-separated or repeated); keys list shows them', async () => {
    const res = await berth([
      'keys',
      'create',
      'pinned',
      '--pinned-model',
      'auto',
      '--tool-pin',
      'olympus,chronos',
      '--tool-pin',
      'search',
    ]);
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/^svc_live_\S+\n$/);
    expect(res.stderr).toMatch(
      /^key (key_\S+) \(inference; model auto; tools olympus,chronos,search\) created; its value is shown once\n$/,
    );
    const keyId = /^key (key_\S+)/.exec(res.stderr)![1]!;

    const list = await berth(['keys', 'list']);
    const [header, ...rows] = lines(list.stdout);
    expect(header).toMatch(/^ID\s+NAME\s+PREFIX\s+SCOPE\s+STATE\s+EXPIRES\s+SPEND LIMIT\s+MODEL\s+TOOLS$/);
    expect(rows.find((r) => r.startsWith(keyId))).toMatch(
      /^key_\S+\s+pinned\s+svc_live_\S+\s+inference\s+active\s+auto\s+olympus,chronos,search$/,
    );

    const refused = await berth(['keys', 'create', 'g', '--scope', 'global', '--pinned-model', 'cli-pool']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^error: .*pinnedModel.*"inference"/);
  });

  it('chat streams from a catalog model (--model or by name) as from an endpoint id', async () => {
    const put = await api.admin('/admin/models/cli-pool', {
      method: 'PUT',
      body: JSON.stringify({
        kind: 'chat',
        backends: [{ endpoint: 'endpt-cli-chat' }],
        pricing: { inputPerMTok: '1.00', outputPerMTok: '2.00' },
      }),
    });
    expect(put.status, await put.clone().text()).toBe(201);
    const env = { BERTH_API_KEY: acct.inference };

    for (const args of [
      ['chat', '--model', 'cli-pool', 'Hello there', '--max-tokens', '8'],
      ['chat', 'cli-pool', 'Hello there', '--max-tokens', '8'],
    ]) {
      const res = await berth(args, env);
      expect(res.stderr).toBe('');
      expect(res.code).toBe(0);
      expect(res.stdout.trim().length).toBeGreaterThan(0);
    }

    const unknown = await berth(['chat', '--model', 'no-such-model', 'Hello'], env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^error: .*no-such-model/);
    const noPrompt = await berth(['chat', 'cli-pool'], env);
    expect(noPrompt.code).toBe(2);
    expect(noPrompt.stderr).toBe('error: a prompt is needed: berth chat <endpoint-id|model> <prompt>\n');
  }, 60_000);

  it('tools list / enable / disable', async () => {
    const before = await berth(['tools', 'list']);
    expect(before.code).toBe(0);
    const [header, ...rows] = lines(before.stdout);
    expect(header).toMatch(/^TOOL\s+KIND\s+PRICE\/CALL\s+ENABLED\s+DESCRIPTION$/);
    expect(rows.find((r) => r.startsWith('olympus '))).toMatch(/^olympus\s+feature\s+\d+\.\d{2,6}\s+no\s+\S/);

    expect(await berth(['tools', 'enable', 'olympus'])).toEqual({
      code: 0,
      stdout: 'tool olympus enabled\n',
      stderr: '',
    });
    expect(await berth(['tools', 'enable', 'chronos'])).toMatchObject({
      code: 0,
      stdout: 'tool chronos enabled\n',
    });
    const after = lines((await berth(['tools', 'list'])).stdout);
    expect(after.find((r) => r.startsWith('olympus '))).toMatch(/^olympus\s+feature\s+\S+\s+yes\s/);

    const off = await berth(['tools', 'disable', 'olympus']);
    expect(off).toMatchObject({ code: 0, stdout: 'tool olympus disabled\n' });
    const unknown = await berth(['tools', 'enable', 'no-such-tool']);
    expect(unknown).toMatchObject({ code: 1, stderr: 'error: Tool "no-such-tool" not found\n' });
    expect(await berth(['tools', 'enable', 'olympus'])).toMatchObject({ code: 0 });
  });

  it('olympus: the policy, a new one from a file, and the dry run of its choice', async () => {
    const policy = await berth(['olympus', 'policy']);
    expect(policy.code).toBe(0);
    expect(lines(policy.stdout)[0]).toMatch(
      /^OBJECTIVE\s+ALLOWED MODELS\s+ROUTES\s+THRESHOLD\s+EMBEDDING MODEL\s+UPDATED$/,
    );
    expect(lines(policy.stdout)[1]).toMatch(
      /^cost\s+\(all\)\s+\(none\)\s+[\d.]+\s+\(cheapest\)\s+\(never set\)$/,
    );

    const file = path.join(tmp, 'policy.yaml');
    writeFileSync(file, 'objective: latency\nallowed_models: [cli-pool]\n');
    const set = await berth(['olympus', 'set-policy', '-f', file]);
    expect(set.code).toBe(0);
    expect(lines(set.stdout)[1]).toMatch(
      /^latency\s+cli-pool\s+\(none\)\s+[\d.]+\s+\(cheapest\)\s+\d{4}-\d\d-\d\d \d\d:\d\d$/,
    );

    const route = await berth(['olympus', 'route', 'Write a haiku'], { BERTH_API_KEY: acct.inference });
    expect(route.code).toBe(0);
    expect(lines(route.stdout)).toEqual([
      expect.stringMatching(/^MODEL\s+REASON\s+OBJECTIVE\s+CONSIDERED\s+ROUTING$/),
      expect.stringMatching(/^cli-pool\s+fastest\s+latency\s+cli-pool$/),
    ]);
  });

  it('billing balance prints a table (YAML with -o yaml)', async () => {
    const credit = await api.admin(`/admin/accounts/${acct.id}/credits`, {
      method: 'POST',
      body: JSON.stringify({ amount: '10.00' }),
      headers: { 'idempotency-key': randomUUID() },
    });
    expect(credit.status).toBe(201);
    const res = await berth(['billing', 'balance']);
    expect(res).toEqual({
      code: 0,
      stdout: 'BALANCE    PAID  FREE QUERIES\n10.00 USD  yes   0\n',
      stderr: '',
    });
    expect(parseYaml((await berth(['billing', 'balance', '-o', 'yaml'])).stdout)).toEqual({
      balance: '10.000000',
      currency: 'USD',
      paid: true,
      freeQueriesRemaining: 0,
    });
  });

  it('chronos: create from a file, list, trigger, executions, delete', async () => {
    const file = path.join(tmp, 'run.yaml');
    writeFileSync(
      file,
      `name: cli-digest
schedule: "0 3 * * *"
timezone: Europe/Berlin
steps:
  - type: chat
    model: cli-pool
    messages: [{ role: user, content: Summarise the day }]
    max_tokens: 8
`,
    );
    const created = await berth(['chronos', 'create', '-f', file]);
    expect(created.code).toBe(0);
    const runHeader = /^ID\s+NAME\s+SCHEDULE\s+TIMEZONE\s+STEPS\s+NEXT FIRE$/;
    const runRow = /^(chr_\S+)\s+cli-digest\s+0 3 \* \* \*\s+Europe\/Berlin\s+1\s+\d{4}-\d\d-\d\d 03:00$/;
    expect(lines(created.stdout)[0]).toMatch(runHeader);
    expect(lines(created.stdout)[1]).toMatch(runRow);
    const runId = runRow.exec(lines(created.stdout)[1]!)![1]!;
    expect(lines((await berth(['chronos', 'list'])).stdout)).toEqual([
      expect.stringMatching(runHeader),
      expect.stringMatching(runRow),
    ]);

    const triggered = await berth(['chronos', 'trigger', runId]);
    expect(triggered.code).toBe(0);
    const execHeader = /^ID\s+RUN\s+TRIGGER\s+STATUS\s+STEPS\s+COST\s+CREATED\s+REASON$/;
    expect(lines(triggered.stdout)[0]).toMatch(execHeader);
    expect(lines(triggered.stdout)[1]).toMatch(
      new RegExp(`^chx_\\S+\\s+${runId}\\s+manual\\s+queued\\s+0\\.00\\s+\\d{4}-`),
    );

    const done = await eventually(
      async () => {
        const res = await berth(['chronos', 'executions', runId]);
        return /\ssucceeded\s/.test(res.stdout) ? res : false;
      },
      { timeout: 30_000, description: 'the execution succeeded' },
    );
    expect(lines(done.stdout)[0]).toMatch(execHeader);
    expect(lines(done.stdout)[1]).toMatch(
      new RegExp(`^chx_\\S+\\s+${runId}\\s+manual\\s+succeeded\\s+chat:succeeded\\s+0\\.\\d+\\s+\\d{4}-`),
    );

    expect(await berth(['chronos', 'delete', runId])).toEqual({
      code: 0,
      stdout: `${runId} deleted\n`,
      stderr: '',
    });
    expect(lines((await berth(['chronos', 'list'])).stdout)).toEqual([expect.stringMatching(runHeader)]);
    const gone = await berth(['chronos', 'get', runId]);
    expect(gone).toMatchObject({ code: 1, stderr: `error: Chronos run ${runId} not found\n` });
  }, 60_000);

  it('billing invoices prints a table, the running week first; its lines bill GPU time at the hardware price', async () => {
    const invoices = await eventually(
      async () => {
        const json = JSON.parse((await berth(['billing', 'invoices', '-o', 'json'])).stdout) as {
          upcoming: { lines: { instanceType: string; ratePerGpuHour: string }[] };
        };
        return json.upcoming.lines.length > 0 ? json : false;
      },
      { timeout: 30_000, description: 'GPU time metered' },
    );
    const hardware = JSON.parse((await berth(['hardware', 'list', '-o', 'json'])).stdout) as {
      id: string;
      pricePerGpuHour: string;
    }[];
    for (const line of invoices.upcoming.lines)
      expect(line.ratePerGpuHour).toBe(hardware.find((h) => h.id === line.instanceType)!.pricePerGpuHour);

    const res = await berth(['billing', 'invoices']);
    expect(res.code).toBe(0);
    expect(lines(res.stdout)).toEqual([
      expect.stringMatching(/^ID\s+STATUS\s+PERIOD\s+TOTAL\s+ISSUED$/),
      expect.stringMatching(/^\s+upcoming\s+\d{4}-\d\d-\d\d – \d{4}-\d\d-\d\d\s+\d+\.\d{2,6} USD$/),
    ]);
  });
});
