// Billing on the embedded database (PGlite, no DATABASE_URL: the quick start's local mode): the
// same wallet, ledger, notifications and pg-boss job queue, in one process, across a restart.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseConfig, startApi, type RunningApi } from '@berth/api';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { bearer } from '@berth/test/support/api';

const ADMIN = 'embedded-admin-token-0123456789';
const dataDir = mkdtempSync(path.join(tmpdir(), 'berth-billing-embedded-'));
let api: RunningApi | undefined;

afterAll(async () => {
  await api?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const start = () =>
  startApi(
    parseConfig({
      PORT: '0',
      BERTH_DATA_DIR: dataDir,
      BERTH_RUNTIME: 'local',
      ADMIN_TOKEN: ADMIN,
      BERTH_FREE_QUERIES: '2',
      SHUTDOWN_GRACE_MS: '1000',
    }),
    { logger: pino({ level: 'silent' }) },
  );
const admin = (a: RunningApi, p: string, init: RequestInit = {}) =>
  fetch(a.url + p, {
    ...init,
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json', ...init.headers },
  });

describe('billing on the embedded database', () => {
  it('credits, spends, counts free queries and keeps it all across a restart', async () => {
    api = await start();
    const signup = await (await admin(api, '/admin/accounts', { method: 'POST', body: '{}' })).json();
    const accountId: string = signup.account.id;
    const key = await (
      await admin(api, `/admin/accounts/${accountId}/keys`, {
        method: 'POST',
        body: JSON.stringify({ name: 'g', scope: 'global' }),
      })
    ).json();
    const { wallet } = api.billing;
    // Free queries first, exactly two.
    const free = await Promise.all(
      [1, 2, 3].map(() => wallet.reserve({ accountId, amount: 10n, free: true })),
    );
    expect(free.filter((r) => r.ok && r.hold.free)).toHaveLength(2);
    for (const r of free)
      if (r.ok) r.hold.settle(0n, { keyId: 'k', model: 'm', promptTokens: 1, completionTokens: 1 });

    const credit = await admin(api, `/admin/accounts/${accountId}/credits`, {
      method: 'POST',
      body: JSON.stringify({ amount: '0.01' }),
      headers: { 'idempotency-key': 'first' },
    });
    expect(credit.status).toBe(201);
    // A paid account is charged; the credit's NOTIFY reached this process's wallet.
    const paid = await wallet.reserve({ accountId, amount: 4_000n, free: true });
    if (!paid.ok) throw new Error('refused after the credit');
    expect(paid.hold.free).toBe(false);
    paid.hold.settle(2_500n, { keyId: 'k', model: 'm', promptTokens: 10, completionTokens: 10 });
    await wallet.flush();
    const balance = await (
      await fetch(`${api.url}/api/billing/balance`, { headers: bearer(key.value) })
    ).json();
    expect(balance).toEqual({ balance: '0.007500', currency: 'USD', paid: true, freeQueriesRemaining: 0 });
    const jobs = await api.billing.jobs.boss.getSchedules();
    expect(jobs.map((s) => [s.name, s.cron])).toContainEqual(['billing-weekly-invoices', '5 0 * * 1']);
    await api.close();

    api = await start();
    const again = await (await fetch(`${api.url}/api/billing/ledger`, { headers: bearer(key.value) })).json();
    expect(again.data.map((e: { kind: string; amount: string }) => [e.kind, e.amount])).toEqual([
      ['charge', '-0.002500'],
      ['credit', '0.010000'],
    ]);
    const reconciliation = await (await admin(api, '/admin/billing/reconciliation')).json();
    expect(reconciliation).toMatchObject({ ok: true, mismatches: [] });
  }, 240_000);
});
