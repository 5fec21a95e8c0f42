// What a wallet (./wallet.ts) is configured and observed with, and the constants its parts share.

export interface WalletConfig {
  flushIntervalMs: number;
  leaseTtlMs: number;
  /** Free Elastic queries of an account that was never credited. */
  freeQueries: number;
  /** How long a replica that is short waits for the others to give back their unused slices. */
  reclaimWaitMs: number;
  /**
   * How long a reservation that fails only because calls in flight hold the money (or the key's
   * allowance) waits for them to settle before answering 402 (0: not at all).
   */
  settleWaitMs?: number;
  /** Named in the details of a 402 (BERTH_CURRENCY). */
  currency?: string;
}

export type ReservationPath = 'local' | 'database' | 'free';
export type SyncKind = 'refill' | 'flush' | 'renew' | 'return' | 'reclaim';

export interface WalletMetrics {
  reservation(path: ReservationPath, outcome: 'ok' | 'insufficient' | 'spend_limit'): void;
  sync(kind: SyncKind, outcome: 'ok' | 'error'): void;
  uncollected(units: bigint): void;
}

/** Renew a lease with calls in flight once less than this part of its ttl is left. */
export const RENEW_FRACTION = 0.5;
/** Time a lease spends before its database expiry: writes take time, clocks tick differently. */
export const DEADLINE_MARGIN_MS = 1_000;
/** Lease sizing: enough for this long at the recent rate, and at least this many calls. */
export const LEASE_HORIZON_MS = 10_000;
export const LEASE_MIN_CALLS = 64n;
/** How long a 402 found by a full check (refill and reclaim) is repeated from memory. */
export const RECHECK_MS = 1_000;
/** BILLING_SETTLE_WAIT_MS's default. */
export const SETTLE_WAIT_MS = 5_000;
/** A reservation waiting for calls in flight looks at the database again at least this often. */
export const WAIT_POLL_MS = 200;
