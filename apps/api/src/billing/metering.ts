// Dedicated GPU time: the seam the endpoint runtimes call, and the weekly invoices built from it.
//
// Integration (the runtimes call this; see README "Billing"):
// - Kubernetes: the API's pod index calls `observe` for an endpoint whenever its engine pods change
//   (replicas = pods bound to a node and not terminated; `since` = the pod's PodScheduled time or
//   deletion time when known) and for every endpoint on each resync, and after a restart with
//   `since: 'lastObserved'` for replicas found gone. Termination is an API-side finalizer
//   (`berth.dev/billing`) the API adds to every DedicatedEndpoint it serves: when the resource has
//   a deletionTimestamp, the API calls `terminate(id, deletionTimestamp or the last pod's end)` and
//   only then removes its finalizer, so the last interval cannot be lost to a missed event or a
//   restart — the finalizer is still there until the write has committed.
// - Local mode: the process driver observes on every replica start (ready) and exit, and the
//   reconciler's TerminationHook calls `terminate` before the row is removed.
import type { Catalog } from '@berth/crds';
import { findInstanceType } from '@berth/crds';
import type { Logger } from 'pino';
import type { GpuShape, MeterState, Observation } from './gpu-time.ts';
import { invoiceLines, WEEK_MS, weekStart, type InvoiceLine } from './gpu-time.ts';
import type { InvoiceRecord, MeteringRepository } from './metering-repository.ts';
import { parseAmount } from '../platform/money.ts';

export interface GpuObservation {
  endpointId: string;
  accountId: string;
  /** The endpoint's hardware.gpuType (an instance type id of the catalog). */
  instanceType: string;
  gpusPerReplica: number;
  /** Replicas holding GPUs now. */
  replicas: number;
  at?: Date;
  since?: Observation['since'];
}

/** What the endpoint runtimes call. Level-triggered and idempotent: call it as often as you like. */
export interface GpuMeter {
  observe(o: GpuObservation): Promise<void>;
  terminate(endpointId: string, at?: Date): Promise<void>;
}

export interface UpcomingInvoice {
  periodStart: Date;
  periodEnd: Date;
  asOf: Date;
  lines: InvoiceLine[];
  total: bigint;
}

export interface GpuBilling extends GpuMeter {
  meter(endpointId: string): Promise<MeterState | null>;
  /** Endpoints whose meter is still open (a runtime closes those of endpoints it no longer has). */
  unterminated(): Promise<string[]>;
  /** Issues every complete week not yet invoiced (the weekly job). */
  issueInvoices(): Promise<{ weeks: Date[]; invoices: number }>;
  invoices(accountId: string): Promise<InvoiceRecord[]>;
  invoice(accountId: string, id: string): Promise<(InvoiceRecord & { lines: InvoiceLine[] }) | null>;
  /** The running week so far. */
  upcoming(accountId: string): Promise<UpcomingInvoice>;
}

export function gpuBilling(deps: {
  repo: MeteringRepository;
  catalog: Catalog;
  currency: string;
  newInvoiceId: () => string;
  logger: Logger;
  now?: () => Date;
}): GpuBilling {
  const now = deps.now ?? (() => new Date());
  const unknownTypes = new Set<string>();

  /** The rate is the catalog's now: it is captured into the interval that opens. */
  const shape = (o: GpuObservation): GpuShape => {
    const t = findInstanceType(deps.catalog, o.instanceType);
    if (!t && !unknownTypes.has(o.instanceType)) {
      unknownTypes.add(o.instanceType);
      deps.logger.warn(
        { instanceType: o.instanceType, endpoint: o.endpointId },
        'GPU time of an instance type missing from the catalog is metered at a rate of 0',
      );
    }
    return {
      accountId: o.accountId,
      instanceType: o.instanceType,
      gpuType: t?.gpuType ?? o.instanceType,
      gpusPerReplica: o.gpusPerReplica,
      ratePerGpuHour: parseAmount(t?.pricePerGpuHour ?? '0') ?? 0n,
    };
  };

  return {
    async observe(o) {
      await deps.repo.observe(o.endpointId, {
        ...shape(o),
        replicas: o.replicas,
        at: o.at ?? now(),
        ...(o.since ? { since: o.since } : {}),
      });
    },
    async terminate(endpointId, at) {
      await deps.repo.terminate(endpointId, at ?? now());
    },
    meter: (endpointId) => deps.repo.meter(endpointId),
    unterminated: () => deps.repo.unterminated(),
    issueInvoices: () => deps.repo.issueInvoices(now(), deps.currency, deps.newInvoiceId),
    invoices: (accountId) => deps.repo.invoices(accountId),
    invoice: (accountId, id) => deps.repo.invoice(accountId, id),
    async upcoming(accountId) {
      const asOf = now();
      const periodStart = weekStart(asOf);
      const periodEnd = new Date(periodStart.getTime() + WEEK_MS);
      const lines = invoiceLines(await deps.repo.intervals(accountId, periodStart, asOf), periodStart, asOf);
      return { periodStart, periodEnd, asOf, lines, total: lines.reduce((s, l) => s + l.amount, 0n) };
    },
  };
}
