// Billing, assembled: the ledger, the hot-path wallet, GPU metering and the weekly invoice job.
// server.ts starts it once; the routes, the Elastic proxy, tools and Chronos use its parts.
import type { Catalog } from '@berth/crds';
import type { Database } from '@berth/db';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { Config } from '../platform/config.ts';
import { startJobQueue, type JobQueue } from '../platform/jobs.ts';
import { newId } from '../platform/ids.ts';
import { ledgerService, type Ledger } from './ledger.ts';
import { meteringRepository } from './metering-repository.ts';
import { gpuBilling, type GpuBilling } from './metering.ts';
import { billingMetrics } from './metrics.ts';
import { pgliteBillingEvents, postgresBillingEvents, type BillingEvents } from './notifications.ts';
import { billingRepository } from './repository.ts';
import { createWallet, type Wallet } from './wallet.ts';

export interface Billing {
  currency: string;
  ledger: Ledger;
  /** The hot path: reserve, settle, release. */
  wallet: Wallet;
  /** Dedicated GPU time: the runtimes' seam and the invoices. */
  gpu: GpuBilling;
  /** The shared job queue (Chronos schedules on it too). */
  jobs: JobQueue;
  close(): Promise<void>;
}

/** Weekly invoices: Monday 00:05 UTC, five minutes after the week closes for late observations. */
export const INVOICE_SCHEDULE = '5 0 * * 1';
export const INVOICE_JOB = 'billing-weekly-invoices';
/** Empty leases whose batch markers are long settled are forgotten after a day. */
const LEASE_PRUNE_JOB = 'billing-prune-leases';

export type BillingConfig = Pick<
  Config,
  | 'DATABASE_URL'
  | 'BERTH_CURRENCY'
  | 'BERTH_FREE_QUERIES'
  | 'BILLING_FLUSH_INTERVAL_MS'
  | 'BILLING_LEASE_TTL_MS'
  | 'BILLING_RECLAIM_WAIT_MS'
  | 'BILLING_SETTLE_WAIT_MS'
  | 'JOBS_MONITOR_INTERVAL_SECONDS'
>;

export async function startBilling(deps: {
  config: BillingConfig;
  db: Database;
  catalog: Catalog;
  logger: Logger;
  registry: Registry;
  /** The clock of GPU metering and invoices (tests move it). */
  now?: () => Date;
}): Promise<Billing> {
  const { config, db } = deps;
  const logger = deps.logger.child({ component: 'billing' });
  const metrics = billingMetrics(deps.registry);
  const repo = billingRepository(db.prisma);
  const meteringRepo = meteringRepository(db.prisma);
  let events: BillingEvents | undefined;
  let jobs: JobQueue | undefined;
  try {
    events = config.DATABASE_URL
      ? await postgresBillingEvents({ url: config.DATABASE_URL, logger })
      : await pgliteBillingEvents(db.pglite!, logger);
    jobs = await startJobQueue(
      config.DATABASE_URL
        ? { kind: 'postgres', url: config.DATABASE_URL }
        : { kind: 'embedded', pglite: db.pglite! },
      logger,
      { monitorIntervalSeconds: config.JOBS_MONITOR_INTERVAL_SECONDS },
    );
    const wallet = createWallet({
      repo,
      events,
      logger,
      metrics,
      config: {
        flushIntervalMs: config.BILLING_FLUSH_INTERVAL_MS,
        leaseTtlMs: config.BILLING_LEASE_TTL_MS,
        freeQueries: config.BERTH_FREE_QUERIES,
        reclaimWaitMs: config.BILLING_RECLAIM_WAIT_MS,
        settleWaitMs: config.BILLING_SETTLE_WAIT_MS,
        currency: config.BERTH_CURRENCY,
      },
    });
    const gpu = gpuBilling({
      repo: meteringRepo,
      catalog: deps.catalog,
      currency: config.BERTH_CURRENCY,
      newInvoiceId: () => newId('inv'),
      logger,
      ...(deps.now ? { now: deps.now } : {}),
    });
    await jobs.schedule(INVOICE_JOB, INVOICE_SCHEDULE, async () => {
      const { weeks, invoices } = await gpu.issueInvoices();
      metrics.invoices(invoices);
      if (weeks.length)
        logger.info({ weeks: weeks.map((w) => w.toISOString()), invoices }, 'issued weekly GPU invoices');
    });
    await jobs.schedule(LEASE_PRUNE_JOB, '17 * * * *', async () => {
      await repo.pruneLeases(86_400_000);
    });
    const e = events;
    const j = jobs;
    return {
      currency: config.BERTH_CURRENCY,
      ledger: ledgerService({ repo, freeQueries: config.BERTH_FREE_QUERIES }),
      wallet,
      gpu,
      jobs: j,
      async close() {
        await wallet.close();
        await j.stop();
        await e.close();
      },
    };
  } catch (err) {
    await jobs?.stop();
    await events?.close();
    throw err;
  }
}
