// Dedicated GPU time on real PostgreSQL with a fake clock: meters, intervals across a restart of the
// API, weekly invoices split at the boundary, issued once, immutable.
import { DEFAULT_CATALOG, type Catalog } from '@berth/crds';
import { openDatabase, openMigratedDatabase, type Database } from '@berth/db';
import type pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { meteringRepository } from '../src/billing/metering-repository.ts';
import { gpuBilling, type GpuBilling } from '../src/billing/metering.ts';
import { newId } from '../src/platform/ids.ts';
import { createTestDatabase, type TestDatabase, sql } from '@berth/test/support/postgres';

const logger = pino({ level: 'silent' });
const HOUR = 3_600_000;
const MIN = 60_000;
/** A Monday: the boundary the example crosses. */
const W = Date.parse('2026-11-30T00:00:00Z');

let tdb: TestDatabase;
let migrated: Database;
const opened: Database[] = [];

beforeAll(async () => {
  tdb = await createTestDatabase('metering');
  migrated = await openMigratedDatabase({ kind: 'postgres', url: tdb.url, poolSize: 2 });
});
afterAll(async () => {
  for (const d of opened) await d.close().catch(() => {});
  await migrated?.close();
  await tdb?.drop();
});

const query = <T extends pg.QueryResultRow>(text: string, values: unknown[] = []) =>
  sql<T>(tdb.url, text, values);

/** An API process's metering: its own connections and a clock the test moves. */
async function api(
  clock: { now: number },
  catalog: Catalog = DEFAULT_CATALOG,
): Promise<GpuBilling & { kill(): Promise<void> }> {
  const db = await openDatabase({ kind: 'postgres', url: tdb.url, poolSize: 2 });
  opened.push(db);
  const gpu = gpuBilling({
    repo: meteringRepository(db.prisma),
    catalog,
    currency: 'USD',
    newInvoiceId: () => newId('inv'),
    logger,
    now: () => new Date(clock.now),
  });
  return { ...gpu, kill: () => db.close() };
}

const l4 = (endpointId: string, accountId: string, replicas: number) => ({
  endpointId,
  accountId,
  instanceType: 'nvidia-l4-24gb',
  gpusPerReplica: 1,
  replicas,
});

describe('the week-boundary example: up 2 h, hibernated 1 h, up 30 min across Monday 00:00, terminated', () => {
  it('invoices 2.5 h, split over the right weeks, across an API restart', async () => {
    const clock = { now: W - 3 * HOUR - 15 * MIN }; // Sunday 20:45
    const first = await api(clock);
    await first.observe(l4('endpt-example', 'acct_example', 1)); // scheduled on a GPU: up
    clock.now += 2 * HOUR; // 22:45
    await first.observe(l4('endpt-example', 'acct_example', 0)); // hibernated
    clock.now += HOUR; // 23:45
    await first.observe(l4('endpt-example', 'acct_example', 1)); // woken
    await first.kill(); // the API dies with the interval open

    const second = await api(clock);
    clock.now += 10 * MIN; // 23:55: the restarted API's first resync sees the same state
    await second.observe(l4('endpt-example', 'acct_example', 1));
    clock.now = W + 5 * MIN; // Monday 00:05: the weekly job
    expect(await second.issueInvoices()).toMatchObject({ invoices: 1 });
    clock.now = W + 15 * MIN; // terminated: the finalizer closes the last interval
    await second.terminate('endpt-example');
    await second.observe(l4('endpt-example', 'acct_example', 1)); // a stale event after it: ignored

    const [week1] = await second.invoices('acct_example');
    expect(week1).toMatchObject({
      periodStart: new Date(W - 7 * 24 * HOUR),
      periodEnd: new Date(W),
      total: 1_800_000n, // 2.25 h at $0.80
    });
    expect((await second.invoice('acct_example', week1!.id))!.lines).toEqual([
      {
        endpointId: 'endpt-example',
        instanceType: 'nvidia-l4-24gb',
        gpuType: 'NVIDIA L4 24GB',
        gpusPerReplica: 1,
        gpuMs: BigInt(2 * HOUR + 15 * MIN), // 20:45–22:45 and 23:45–00:00; the hibernated hour is free
        ratePerGpuHour: 800_000n,
        amount: 1_800_000n,
      },
    ]);

    // The next week, before its invoice: the upcoming view shows the 15 minutes.
    clock.now = W + 2 * 24 * HOUR;
    expect(await second.upcoming('acct_example')).toMatchObject({
      periodStart: new Date(W),
      total: 200_000n,
      lines: [{ endpointId: 'endpt-example', gpuMs: BigInt(15 * MIN), amount: 200_000n }],
    });
    clock.now = W + 7 * 24 * HOUR + 5 * MIN;
    expect(await second.issueInvoices()).toMatchObject({ invoices: 1 });
    const invoices = await second.invoices('acct_example');
    expect(invoices.map((i) => [i.periodStart.toISOString(), i.total])).toEqual([
      [new Date(W).toISOString(), 200_000n], // 0.25 h
      [new Date(W - 7 * 24 * HOUR).toISOString(), 1_800_000n], // 2.25 h: 2.5 h in all
    ]);
    // Nothing else was ever recorded for this endpoint: three closed intervals, no open meter.
    const intervals = await query<{ started_at: Date; ended_at: Date }>(
      `SELECT started_at, ended_at FROM gpu_intervals WHERE endpoint_id = 'endpt-example' ORDER BY started_at`,
    );
    expect(intervals.map((i) => [i.started_at.getTime() - W, i.ended_at.getTime() - W])).toEqual([
      [-3 * HOUR - 15 * MIN, -HOUR - 15 * MIN],
      [-15 * MIN, 0], // cut at the week's end by the job
      [0, 15 * MIN],
    ]);
    expect(await second.meter('endpt-example')).toMatchObject({ replicas: 0, openedAt: null });
    await second.kill();
  });
});

describe('invoices', () => {
  it('are issued once even when two replicas run the job at the same moment', async () => {
    const clock = { now: W + 14 * 24 * HOUR + HOUR };
    const a = await api(clock);
    const b = await api(clock);
    await a.observe(l4('endpt-twice', 'acct_twice', 2));
    clock.now += 2 * HOUR;
    await a.observe(l4('endpt-twice', 'acct_twice', 0));
    clock.now = W + 21 * 24 * HOUR + 5 * MIN;
    const results = await Promise.all([a.issueInvoices(), b.issueInvoices()]);
    expect(results.map((r) => r.invoices).sort()).toEqual([0, 1]);
    const rows = await query<{ n: number }>(
      `SELECT count(*)::int AS n FROM invoices WHERE account_id = 'acct_twice'`,
    );
    expect(rows[0]!.n).toBe(1);
    const [inv] = await a.invoices('acct_twice');
    expect(inv!.total).toBe(3_200_000n); // 2 replicas × 2 h at $0.80
  });

  it('are immutable: the database refuses to change or delete them, or the ledger of intervals', async () => {
    const [inv] = await query<{ id: string }>('SELECT id FROM invoices LIMIT 1');
    for (const sql of [
      `UPDATE invoices SET total = 0 WHERE id = '${inv!.id}'`,
      `DELETE FROM invoices WHERE id = '${inv!.id}'`,
      `UPDATE invoice_lines SET amount = 0 WHERE invoice_id = '${inv!.id}'`,
      `DELETE FROM gpu_intervals`,
      `TRUNCATE invoices CASCADE`,
    ]) {
      await expect(query(sql), sql).rejects.toThrow(/append-only/);
    }
  });

  it('a price change applies from the next observation and never rewrites the past', async () => {
    const clock = { now: W + 28 * 24 * HOUR + HOUR };
    const cheap = await api(clock);
    await cheap.observe(l4('endpt-price', 'acct_price', 1));
    clock.now += HOUR;
    const dearer: Catalog = {
      instanceTypes: DEFAULT_CATALOG.instanceTypes.map((t) =>
        t.id === 'nvidia-l4-24gb' ? { ...t, pricePerGpuHour: '1.20' } : t,
      ),
    };
    const restarted = await api(clock, dearer); // an API started with the new catalog
    await restarted.observe(l4('endpt-price', 'acct_price', 1));
    clock.now += HOUR;
    await restarted.terminate('endpt-price');
    const upcoming = await restarted.upcoming('acct_price');
    expect(upcoming.lines.map((l) => [l.ratePerGpuHour, l.gpuMs, l.amount])).toEqual([
      [800_000n, BigInt(HOUR), 800_000n],
      [1_200_000n, BigInt(HOUR), 1_200_000n],
    ]);
  });

  it('an instance type missing from the catalog is metered at 0, with its id as the GPU type', async () => {
    const clock = { now: W + 35 * 24 * HOUR };
    const gpu = await api(clock);
    await gpu.observe({ ...l4('endpt-odd', 'acct_odd', 1), instanceType: 'amd-mi300x' });
    clock.now += HOUR;
    expect((await gpu.upcoming('acct_odd')).lines).toEqual([
      expect.objectContaining({ gpuType: 'amd-mi300x', gpuMs: BigInt(HOUR), amount: 0n }),
    ]);
  });
});
