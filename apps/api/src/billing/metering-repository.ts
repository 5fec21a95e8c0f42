// Data access for GPU meters, closed intervals and weekly invoices. The decisions are the pure
// functions of gpu-time.ts; this module runs them under locks: an observation holds the invoice
// state row FOR SHARE and its meter FOR UPDATE, invoice generation holds the state row FOR UPDATE,
// so an observation can never slip into a week while it is being invoiced.
import type { Prisma, PrismaClient } from '@berth/db';
import {
  closeAt,
  invoiceLines,
  meterStep,
  terminateStep,
  WEEK_MS,
  weekStart,
  type ClosedInterval,
  type InvoiceLine,
  type MeterState,
  type MeterStep,
  type Observation,
} from './gpu-time.ts';

type Tx = Prisma.TransactionClient;

export interface IntervalRow extends ClosedInterval {
  endpointId: string;
}

export interface InvoiceRecord {
  id: string;
  accountId: string;
  periodStart: Date;
  periodEnd: Date;
  currency: string;
  total: bigint;
  issuedAt: Date;
}

export interface MeteringRepository {
  observe(endpointId: string, obs: Observation): Promise<MeterStep>;
  terminate(endpointId: string, at: Date): Promise<MeterStep>;
  meter(endpointId: string): Promise<MeterState | null>;
  /** Endpoints whose meter is not closed yet. */
  unterminated(): Promise<string[]>;
  /** Closed intervals of the account overlapping [from, to), and its open ones as if closed at `to`. */
  intervals(accountId: string, from: Date, to: Date): Promise<IntervalRow[]>;
  /** Issues every complete week not yet invoiced (up to `now`); returns what it issued. */
  issueInvoices(
    now: Date,
    currency: string,
    newId: () => string,
  ): Promise<{ weeks: Date[]; invoices: number }>;
  invoicedThrough(): Promise<Date | null>;
  invoices(accountId: string): Promise<InvoiceRecord[]>;
  invoice(accountId: string, id: string): Promise<(InvoiceRecord & { lines: InvoiceLine[] }) | null>;
}

const TX_OPTIONS = { maxWait: 10_000, timeout: 60_000 };

/** What ran, as both meters and intervals hold it. */
const shapeColumns = {
  accountId: true,
  instanceType: true,
  gpuType: true,
  gpusPerReplica: true,
  ratePerGpuHour: true,
  replicas: true,
} as const;
const meterColumns = { ...shapeColumns, openedAt: true, lastObservedAt: true, terminatedAt: true } as const;
const intervalColumns = { endpointId: true, ...shapeColumns, startedAt: true, endedAt: true } as const;

const invoiceColumns = {
  id: true,
  accountId: true,
  periodStart: true,
  periodEnd: true,
  currency: true,
  total: true,
  issuedAt: true,
} as const;

async function floorFor(tx: Tx, mode: 'share' | 'update'): Promise<Date | null> {
  const rows =
    mode === 'share'
      ? await tx.$queryRaw<{ t: Date | null }[]>`
          SELECT invoiced_through AS t FROM gpu_invoice_state WHERE id = 1 FOR SHARE`
      : await tx.$queryRaw<{ t: Date | null }[]>`
          SELECT invoiced_through AS t FROM gpu_invoice_state WHERE id = 1 FOR UPDATE`;
  return rows[0]?.t ?? null;
}

async function lockMeter(tx: Tx, endpointId: string): Promise<MeterState | null> {
  const [row] = await tx.$queryRaw<{ endpoint_id: string }[]>`
    SELECT endpoint_id FROM gpu_meters WHERE endpoint_id = ${endpointId} FOR UPDATE`;
  if (!row) return null;
  return tx.gpuMeter.findUnique({ where: { endpointId }, select: meterColumns });
}

/** Writes a step: the interval it closes (once: a replay finds it there) and the meter after it. */
async function apply(tx: Tx, endpointId: string, existed: boolean, step: MeterStep): Promise<boolean> {
  if (step.close) {
    await tx.gpuInterval.createMany({ data: [{ endpointId, ...step.close }], skipDuplicates: true });
  }
  if (!step.next) return true;
  if (existed) {
    await tx.gpuMeter.update({ where: { endpointId }, data: step.next });
    return true;
  }
  const inserted = await tx.gpuMeter.createMany({
    data: [{ endpointId, ...step.next }],
    skipDuplicates: true,
  });
  return inserted.count === 1;
}

export function meteringRepository(prisma: PrismaClient): MeteringRepository {
  const withMeter = async (
    endpointId: string,
    decide: (current: MeterState | null, floor: Date | null) => MeterStep,
  ): Promise<MeterStep> => {
    // Two attempts: a concurrent first observation of the same endpoint may insert its meter first.
    for (let attempt = 0; ; attempt++) {
      const outcome = await prisma.$transaction(async (tx) => {
        const floor = await floorFor(tx, 'share');
        const current = await lockMeter(tx, endpointId);
        const step = decide(current, floor);
        const ok = await apply(tx, endpointId, current !== null, step);
        return ok ? step : undefined;
      }, TX_OPTIONS);
      if (outcome) return outcome;
      if (attempt >= 1) throw new Error(`gpu meter of ${endpointId}: concurrent first observations`);
    }
  };

  return {
    observe(endpointId, obs) {
      return withMeter(endpointId, (current, floor) => meterStep(current, obs, floor));
    },

    terminate(endpointId, at) {
      return withMeter(endpointId, (current, floor) => terminateStep(current, at, floor));
    },

    meter(endpointId) {
      return prisma.gpuMeter.findUnique({ where: { endpointId }, select: meterColumns });
    },

    async unterminated() {
      const rows = await prisma.gpuMeter.findMany({
        where: { terminatedAt: null },
        select: { endpointId: true },
      });
      return rows.map((r) => r.endpointId);
    },

    async intervals(accountId, from, to) {
      const closed = await prisma.gpuInterval.findMany({
        where: { accountId, endedAt: { gt: from }, startedAt: { lt: to } },
        select: intervalColumns,
      });
      const open = await prisma.gpuMeter.findMany({
        where: { accountId, replicas: { gt: 0 }, openedAt: { lt: to } },
        select: { endpointId: true, ...meterColumns },
      });
      return [
        ...closed,
        ...open.flatMap((m) => {
          const i = closeAt(m, to);
          return i ? [{ endpointId: m.endpointId, ...i }] : [];
        }),
      ];
    },

    issueInvoices(now, currency, newId) {
      return prisma.$transaction(async (tx) => {
        let through = await floorFor(tx, 'update');
        if (!through) {
          const [first] = await tx.$queryRaw<{ t: Date | null }[]>`
            SELECT LEAST(
              (SELECT MIN(started_at) FROM gpu_intervals),
              (SELECT MIN(opened_at) FROM gpu_meters WHERE replicas > 0)
            ) AS t`;
          through = weekStart(first?.t ?? now);
        }
        const weeks: Date[] = [];
        let invoices = 0;
        for (let start = through; start.getTime() + WEEK_MS <= now.getTime();) {
          const end = new Date(start.getTime() + WEEK_MS);
          // Open intervals are cut at the week's end, so the next week starts from a closed one.
          const open = await tx.$queryRaw<{ endpoint_id: string }[]>`
            SELECT endpoint_id FROM gpu_meters WHERE replicas > 0 AND opened_at < ${end} FOR UPDATE`;
          for (const { endpoint_id: endpointId } of open) {
            const m = (await tx.gpuMeter.findUnique({ where: { endpointId }, select: meterColumns }))!;
            const cut = closeAt(m, end);
            if (cut)
              await tx.gpuInterval.createMany({ data: [{ endpointId, ...cut }], skipDuplicates: true });
            await tx.gpuMeter.update({ where: { endpointId }, data: { openedAt: end } });
          }
          const rows = await tx.gpuInterval.findMany({
            where: { endedAt: { gt: start }, startedAt: { lt: end } },
            select: intervalColumns,
          });
          const byAccount = new Map<string, IntervalRow[]>();
          for (const r of rows) byAccount.set(r.accountId, [...(byAccount.get(r.accountId) ?? []), r]);
          for (const [accountId, intervals] of [...byAccount].sort(([a], [b]) => a.localeCompare(b))) {
            const lines = invoiceLines(intervals, start, end);
            if (!lines.length) continue;
            const id = newId();
            await tx.invoice.create({
              data: {
                id,
                accountId,
                periodStart: start,
                periodEnd: end,
                currency,
                total: lines.reduce((sum, l) => sum + l.amount, 0n),
                lines: { create: lines.map((l, position) => ({ position, ...l })) },
              },
              select: { id: true },
            });
            invoices++;
          }
          weeks.push(start);
          start = end;
          through = end;
        }
        await tx.$executeRaw`UPDATE gpu_invoice_state SET invoiced_through = ${through} WHERE id = 1`;
        return { weeks, invoices };
      }, TX_OPTIONS);
    },

    async invoicedThrough() {
      const row = await prisma.gpuInvoiceState.findUnique({ where: { id: 1 } });
      return row?.invoicedThrough ?? null;
    },

    invoices(accountId) {
      return prisma.invoice.findMany({
        where: { accountId },
        orderBy: { periodStart: 'desc' },
        select: invoiceColumns,
      });
    },

    async invoice(accountId, id) {
      const found = await prisma.invoice.findFirst({
        where: { id, accountId },
        select: {
          ...invoiceColumns,
          lines: {
            orderBy: { position: 'asc' },
            select: {
              endpointId: true,
              instanceType: true,
              gpuType: true,
              gpusPerReplica: true,
              gpuMs: true,
              ratePerGpuHour: true,
              amount: true,
            },
          },
        },
      });
      return found;
    },
  };
}
