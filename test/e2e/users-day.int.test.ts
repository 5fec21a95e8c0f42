// One user's day against one long-lived Berth, started as the README starts it: `npm start` from a
// clean data directory with nothing set but the port and the data directory (no HOST, no
// DATABASE_URL, no cluster: local mode on the embedded database). Every step runs against that same
// process, in order, so what one path leaves behind (caches, pools, short-circuits) meets the next:
// sign up in the dashboard (Chromium), a key made there, a platform endpoint in the Elastic catalog,
// Elastic and dedicated calls (streamed and not) with the official OpenAI SDK, a managed tool,
// Chronos runs triggered and scheduled, and billing read back — charges equal to what was used.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '@berth/operator/local';
import { eventually } from '../support/eventually.ts';
import { startMcpServer, type TestMcpServer } from '../support/mcp-server.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** A new terminal's environment: nothing that would pick another database, runtime or address. */
function userEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env))
    if (!/^(KUBECONFIG|KUBERNETES_|DATABASE_URL|ADMIN_TOKEN|PORT|HOST|BERTH_|HF_|VITEST|npm_)/.test(k))
      env[k] = v;
  env.PATH = `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH ?? ''}`;
  return { ...env, ...extra };
}

let work: string;
let base: string;
let api: ChildProcess;
let output = '';
let admin: string;
let browser: Browser;
let page: Page;
let mcp: TestMcpServer;

const send = (token: string, method: string, pathname: string, body?: unknown, headers = {}) =>
  fetch(base + pathname, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...headers,
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
const json = async <T = Record<string, unknown>>(
  res: Response | Promise<Response>,
  status = 200,
): Promise<T> => {
  const r = await res;
  const text = await r.text();
  expect(r.status, `${r.url}: ${text}`).toBe(status);
  return JSON.parse(text) as T;
};
const micro = (s: string) => BigInt(s.replace('.', ''));

beforeAll(async () => {
  work = mkdtempSync(path.join(tmpdir(), 'berth-day-'));
  const port = await freePort();
  base = `http://localhost:${port}`;
  api = spawn('npm', ['start'], {
    cwd: root,
    env: userEnv({ PORT: String(port), BERTH_DATA_DIR: path.join(work, '.data') }),
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  api.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  api.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  await eventually(
    async () => {
      if (api.exitCode !== null) throw new Error(`npm start exited with ${api.exitCode}:\n${output}`);
      return (await fetch(`${base}/readyz`).catch(() => undefined))?.ok ?? false;
    },
    { timeout: 60_000, interval: 200, description: 'npm start to answer /readyz' },
  );
  admin = readFileSync(path.join(work, '.data', 'admin-token'), 'utf8').trim();
  [browser, mcp] = await Promise.all([
    chromium.launch({
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
    }),
    startMcpServer(),
  ]);
  page = await browser.newPage();
  page.setDefaultTimeout(20_000);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await mcp?.close();
  if (api?.pid && api.exitCode === null) {
    process.kill(-api.pid, 'SIGINT');
    await new Promise((r) => {
      const t = setTimeout(r, 15_000);
      api.once('exit', () => (clearTimeout(t), r(undefined)));
    });
    try {
      process.kill(-api.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('a user’s day against one `npm start`', () => {
  it('signs up, makes keys, calls Elastic and a dedicated endpoint, uses tools and Chronos, reads the bill', async () => {
    // ── Sign up in the dashboard, through the development identity provider `npm start` serves.
    await page.goto(base + '/');
    await page.getByRole('link', { name: /^Sign in with Development identity provider/ }).click();
    await page.waitForURL(/\/idp\//);
    await page.getByLabel('User id').fill('grace');
    await page.getByLabel('Display name').fill('Grace Hopper');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${base}/endpoints`);
    const notice = page.getByRole('region', { name: 'Welcome to Berth: your API key' });
    const inference = await notice.getByLabel('Your new API key').inputValue();
    expect(inference).toMatch(/^svc_live_/);
    await notice.getByRole('button', { name: 'I have copied it' }).click();

    // ── A global key, made in Settings → Keys.
    await page
      .getByRole('navigation', { name: 'Main' })
      .getByRole('link', { name: 'Settings → Keys' })
      .click();
    await page.getByLabel('Name', { exact: true }).fill('laptop');
    await page.getByLabel('Scope').selectOption('global');
    await page.getByRole('button', { name: 'Create key' }).click();
    const key = await page.getByLabel('Value of laptop').inputValue();
    expect(key).toMatch(/^svc_live_/);
    // The account the signup made, as the dashboard's session names it.
    const session = (await (await page.request.get(`${base}/auth/session`)).json()) as {
      account: { id: string };
    };
    const account = session.account.id;

    // ── The platform's catalog model, on a platform endpoint (the README's Elastic section).
    const platform = await json<{ account: { id: string } }>(
      send(admin, 'POST', '/admin/accounts', { name: 'platform' }),
      201,
    );
    const pkey = (
      await json<{ value: string }>(
        send(admin, 'POST', `/admin/accounts/${platform.account.id}/keys`, {
          name: 'catalog',
          scope: 'compute',
        }),
        201,
      )
    ).value;
    const hardware = { gpuType: 'nvidia-l4-24gb', gpuCount: 1 };
    const pool = await json<{ id: string }>(
      send(pkey, 'POST', '/api/endpoints', { model: 'Qwen/Qwen2.5-0.5B-Instruct', hardware }),
      201,
    );
    await json(
      send(admin, 'PUT', '/admin/models/qwen-small', {
        kind: 'chat',
        backends: [{ endpoint: pool.id }],
        pricing: { inputPerMTok: '0.10', outputPerMTok: '0.40' },
      }),
      201,
    );
    // The user's own dedicated endpoint.
    const mine = await json<{ id: string }>(
      send(key, 'POST', '/api/endpoints', { model: 'Qwen/Qwen2.5-0.5B-Instruct', hardware }),
      201,
    );
    for (const [id, k] of [
      [pool.id, pkey],
      [mine.id, key],
    ] as const)
      await eventually(
        async () => (await json<{ status: string }>(send(k, 'GET', `/api/endpoints/${id}`))).status === 'up',
        {
          timeout: 60_000,
          description: `${id} up`,
        },
      );

    // Money for the day.
    await json(
      send(
        admin,
        'POST',
        `/admin/accounts/${account}/credits`,
        { amount: '5.00' },
        { 'idempotency-key': randomUUID() },
      ),
      201,
    );

    // ── Elastic and dedicated, non-streamed first (the path a later Chronos step must not trip on).
    const elastic = new OpenAI({ baseURL: `${base}/api`, apiKey: inference, maxRetries: 0 });
    const dedicated = new OpenAI({ baseURL: `${base}/api/d/${mine.id}`, apiKey: inference, maxRetries: 0 });
    const messages = [{ role: 'user' as const, content: 'Hello!' }];
    const plain = await elastic.chat.completions.create({ model: 'qwen-small', messages, max_tokens: 8 });
    expect(plain.model).toBe('qwen-small');
    expect(plain.choices[0]!.message.content!.length).toBeGreaterThan(0);
    const direct = await dedicated.chat.completions.create({
      model: 'Qwen/Qwen2.5-0.5B-Instruct',
      messages,
      max_tokens: 8,
    });
    expect(direct.choices[0]!.message.content!.length).toBeGreaterThan(0);
    for (const [client, model] of [
      [elastic, 'qwen-small'],
      [dedicated, 'Qwen/Qwen2.5-0.5B-Instruct'],
    ] as const) {
      let text = '';
      for await (const chunk of await client.chat.completions.create({
        model,
        messages,
        max_tokens: 8,
        stream: true,
      }))
        text += chunk.choices[0]?.delta.content ?? '';
      expect(text.length, model).toBeGreaterThan(0);
    }

    // ── Tools: a managed tool and Chronos, enabled for the account.
    await json(
      send(admin, 'PUT', '/admin/tools/weather', {
        description: 'Weather',
        url: mcp.url,
        price_per_call: '0.002',
      }),
      201,
    );
    for (const tool_id of ['weather', 'chronos']) await json(send(key, 'POST', '/api/tools', { tool_id }));
    const withTool = (await elastic.chat.completions.create({
      model: 'qwen-small',
      messages: [{ role: 'user', content: 'Plan:\ncall weather {"city": "Paris"}' }],
      tools: [{ type: 'mcp', server_label: 'weather' } as never],
    })) as { model: string; berth_tool_calls?: { name: string; output: string }[] };
    expect(withTool.model).toBe('qwen-small');
    expect(withTool.berth_tool_calls?.map((c) => c.output)).toEqual(['Sunny, 21 C in Paris']);

    // ── Chronos: a run triggered by hand, and one on a schedule, in this same process.
    const step = {
      type: 'chat',
      model: 'qwen-small',
      messages: [{ role: 'user', content: 'Good morning' }],
      max_tokens: 8,
    };
    interface Execution {
      trigger: string;
      status: string;
      reason: string | null;
      cost: string;
      fee: string;
      steps: { status: string; model?: string; cost: string }[];
    }
    const executions = async (runId: string, n: number) => {
      let list: Execution[] = [];
      await eventually(
        async () => {
          list = (
            await json<{ data: Execution[] }>(send(key, 'GET', `/api/chronos/runs/${runId}/executions`))
          ).data;
          return list.length >= n && list.every((e) => e.status === 'succeeded' || e.status === 'failed');
        },
        { timeout: 90_000, interval: 500, description: `${n} execution(s) of ${runId}` },
      );
      return list;
    };
    const manual = await json<{ id: string }>(
      send(key, 'POST', '/api/chronos/runs', {
        name: 'by hand',
        schedule: '@daily',
        timezone: 'UTC',
        steps: [step],
      }),
      201,
    );
    await json(send(key, 'POST', `/api/chronos/runs/${manual.id}/trigger`), 202);
    const [byHand] = await executions(manual.id, 1);
    expect(byHand!.status, byHand!.reason ?? '').toBe('succeeded');
    expect(byHand!.steps[0]).toMatchObject({ status: 'succeeded', model: 'qwen-small' });

    const scheduled = await json<{ id: string }>(
      send(key, 'POST', '/api/chronos/runs', {
        name: 'every minute',
        schedule: '* * * * *',
        timezone: 'Europe/Berlin',
        steps: [step],
      }),
      201,
    );
    const [fired] = await executions(scheduled.id, 1);
    expect(fired!.trigger).toBe('schedule');
    expect(fired!.status, fired!.reason ?? '').toBe('succeeded');
    await json(send(key, 'DELETE', `/api/chronos/runs/${scheduled.id}`));

    // ── The bill: the ledger's charges are what the day used, to the micro-unit.
    const usage = await eventually(
      async () => {
        const u = (
          await json<{ data: { model: string; requests: number; cost: string }[] }>(
            send(key, 'GET', '/api/billing/usage'),
          )
        ).data;
        return u.some((r) => r.model === 'chronos' && r.requests >= 2) ? u : false;
      },
      { timeout: 15_000, description: 'the day’s usage flushed' },
    );
    const models = new Set(usage.map((u) => u.model));
    expect(models).toEqual(new Set(['qwen-small', 'tool:weather', 'chronos']));
    const used = usage.reduce((sum, u) => sum + micro(u.cost), 0n);
    const balance = await json<{ balance: string; paid: boolean }>(send(key, 'GET', '/api/billing/balance'));
    expect(balance.paid).toBe(true);
    expect(micro(balance.balance)).toBe(5_000_000n - used);
    const chronosFees = usage.filter((u) => u.model === 'chronos').reduce((n, u) => n + u.requests, 0);
    expect(chronosFees).toBe(2);

    // Nothing in the process's log went wrong along the way.
    expect(output).not.toMatch(/"level":(50|60)/);
    expect(output).not.toContain('undefined:');
  }, 300_000);
});
