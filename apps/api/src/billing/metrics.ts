// Billing metrics, on the API's registry. Closed label sets: paths, outcomes and write kinds, never
// account ids.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { WalletMetrics } from './wallet.ts';

export function billingMetrics(registry: Registry): WalletMetrics & { invoices(n: number): void } {
  const reservations = new Counter({
    name: 'berth_billing_reservations_total',
    help: 'Reservations by path (local: no database round trip; database: a lease write; free: a free query) and outcome',
    labelNames: ['path', 'outcome'],
    registers: [registry],
  });
  const writes = new Counter({
    name: 'berth_billing_lease_writes_total',
    help: 'Lease writes (one database transaction each) by kind and outcome',
    labelNames: ['kind', 'outcome'],
    registers: [registry],
  });
  const uncollected = new Counter({
    name: 'berth_billing_uncollected_units_total',
    help: 'Micro-units of settled calls no balance covered (a reservation too low, or a lease lost to expiry)',
    registers: [registry],
  });
  const invoices = new Counter({
    name: 'berth_billing_invoices_issued_total',
    help: 'Weekly GPU invoices issued by this replica',
    registers: [registry],
  });
  return {
    reservation: (path, outcome) => reservations.inc({ path, outcome }),
    sync: (kind, outcome) => writes.inc({ kind, outcome }),
    uncollected: (units) => uncollected.inc(Number(units)),
    invoices: (n) => invoices.inc(n),
  };
}

/** The GPU meter: whether this replica leads it, and its syncs (one endpoint each) by outcome. */
export function gpuMeterMetrics(registry: Registry): {
  leading(on: boolean): void;
  sync(outcome: 'ok' | 'error'): void;
} {
  const leader = new Gauge({
    name: 'berth_gpu_meter_leader',
    help: '1 while this API replica runs the GPU meter (exactly one replica does)',
    registers: [registry],
  });
  const syncs = new Counter({
    name: 'berth_gpu_meter_syncs_total',
    help: 'GPU meter syncs of one endpoint (its replicas replayed into its meter) by outcome',
    labelNames: ['outcome'],
    registers: [registry],
  });
  return { leading: (on) => leader.set(on ? 1 : 0), sync: (outcome) => syncs.inc({ outcome }) };
}
