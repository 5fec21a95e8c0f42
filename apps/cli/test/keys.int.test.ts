// `berth keys` with the built binary against a real API (issue 32): a key created with an expiry, a
// spend limit and dearer fallbacks allowed; the list and `show` with what it spent this period; the
// limit changed and removed; a rotation printing the new value once and when the old key stops; bad
// values refused before any request, with the expected form.
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '@berth/test/support/api';
import { runTool } from '@berth/test/support/process';

const cliDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const bin = path.join(cliDir, 'dist/berth.mjs');
let api: TestApi;
let tmp: string;
let acct: Awaited<ReturnType<TestApi['newAccount']>>;

beforeAll(async () => {
  execFileSync(process.execPath, [path.join(cliDir, 'build.mjs')]);
  tmp = mkdtempSync(path.join(tmpdir(), 'berth-cli-keys-'));
  api = await startTestApi({});
  acct = await api.newAccount();
  await api.admin(`/admin/accounts/${acct.id}/credits`, {
    method: 'POST',
    body: JSON.stringify({ amount: '1.00' }),
    headers: { 'idempotency-key': randomUUID() },
  });
}, 60_000);

afterAll(async () => {
  await api?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

const berth = (args: string[]) =>
  runTool(bin, args, {
    env: {
      PATH: process.env.PATH ?? '',
      BERTH_CONFIG_DIR: path.join(tmp, 'config'),
      BERTH_API_URL: api.url,
      BERTH_API_KEY: acct.global,
    },
  });

const rowOf = (stdout: string, id: string) => stdout.split('\n').find((l) => l.startsWith(id)) ?? '';

describe('berth keys', () => {
  it('create with an expiry, a spend limit and dearer fallbacks; list and show them; change and remove the limit', async () => {
    const res = await berth([
      'keys',
      'create',
      'capped',
      '--expires',
      '2099-01-01T00:00:00Z',
      '--spend-limit',
      '2.50/week',
      '--allow-dearer-fallback',
    ]);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/^svc_live_\S+\n$/);
    expect(res.stderr).toMatch(
      /^key (key_\S+) \(inference; expires 2099-01-01 00:00; spend limit 2\.50\/week; dearer fallbacks allowed\) created; its value is shown once\n$/,
    );
    const id = /^key (key_\S+)/.exec(res.stderr)![1]!;

    const list = await berth(['keys', 'list']);
    expect(list.stdout.split('\n')[0]).toMatch(
      /^ID\s+NAME\s+PREFIX\s+SCOPE\s+STATE\s+EXPIRES\s+SPEND LIMIT\s+MODEL\s+TOOLS$/,
    );
    expect(rowOf(list.stdout, id)).toMatch(
      /^key_\S+\s+capped\s+svc_live_\S+\s+inference\s+active\s+2099-01-01 00:00\s+0\.00 of 2\.50\/week$/,
    );
    const show = await berth(['keys', 'show', id, '-o', 'json']);
    expect(JSON.parse(show.stdout)).toMatchObject({
      id,
      allowDearerFallback: true,
      spendLimit: {
        amount: '2.500000',
        period: 'week',
        spent: '0.000000',
        resetsAt: expect.stringMatching(/T00:00:00\.000Z$/),
      },
    });

    const changed = await berth(['keys', 'update', id, '--spend-limit', '10/day', '--expires', 'never']);
    expect(changed.code, changed.stderr).toBe(0);
    expect(rowOf(changed.stdout, id)).toMatch(/\s+active\s+0\.00 of 10\.00\/day$/);
    const removed = await berth(['keys', 'update', id, '--spend-limit', 'none', '-o', 'json']);
    expect(JSON.parse(removed.stdout)).toMatchObject({ spendLimit: null, expiresAt: null });
  });

  it('rotate: the new value once on standard output, and when the old key stops', async () => {
    const made = await berth(['keys', 'create', 'rotating']);
    const id = /^key (key_\S+)/.exec(made.stderr)![1]!;
    const res = await berth(['keys', 'rotate', id, '--grace', '2h']);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/^svc_live_\S+\n$/);
    const m =
      /^key (key_\S+) replaces (key_\S+), which keeps working until (\S+); the new value is shown once\n$/.exec(
        res.stderr,
      );
    expect(m![2]).toBe(id);
    const grace = Date.parse(m![3]!) - Date.now();
    expect(grace).toBeGreaterThan(2 * 3_600_000 - 60_000);
    expect(grace).toBeLessThanOrEqual(2 * 3_600_000);
    const again = await berth(['keys', 'rotate', id]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`was already rotated (replaced by ${m![1]})`);
  });

  it('bad values are refused before any request, saying what is expected (exit 2)', async () => {
    for (const [args, message] of [
      [['keys', 'create', 'x', '--spend-limit', '10'], 'expected AMOUNT/PERIOD, e.g. 10.00/day'],
      [
        ['keys', 'create', 'x', '--expires', 'soon'],
        'expected an ISO 8601 time, a duration such as 90d, or never',
      ],
      [['keys', 'rotate', 'key_x', '--grace', '1y'], 'expected a duration such as 30m, 24h, 7d, or seconds'],
    ] as const) {
      const res = await berth([...args]);
      expect(res.code).toBe(2);
      expect(res.stderr).toContain(message);
    }
  });
});
