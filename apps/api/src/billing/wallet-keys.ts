// Per-key spend limits, as a wallet (./wallet.ts) holds them: a key with a limit gets, like its
// account's balance, a slice of its allowance for the current period (a key lease, counted in the
// database under the account's row lock) and reserves against it in memory. Keys of one rotation
// line share one allowance (their lineage). Charges are counted per period with the account's batch,
// so a key's spend and the account's balance move in the same transaction.
import type { KeyCharge, KeyResult, SpendPeriod } from './key-lease-repository.ts';

/** One line of keys' allowance in one period, on this replica. */
export interface KeyAllowance {
  lineage: string;
  limit: bigint;
  period: SpendPeriod;
  periodStart: Date;
  /** Wall-clock milliseconds from which this period's slice may no longer be spent. */
  periodEndMs: number;
  /** The slice lent to this replica (database's figure after the last write). */
  lease: bigint;
  reserved: bigint;
  holds: number;
  /** Settled, not yet in a batch; and in the batch being written. */
  unbatched: bigint;
  batched: bigint;
  /** As of the last write: spent in the period, unlent, and lent to other replicas. */
  spent: bigint;
  free: bigint;
  othersLeased: bigint;
  /** Monotonic time of the last write that named the key (what it said is trusted for a moment). */
  seenAt: number;
}

/** What this replica knows of one key: nothing yet (a write will say), or its allowance if limited. */
export interface KeyInfo {
  known: boolean;
  lineage?: string;
}

/** What the allowance still offers: lent, less what settled calls owe and calls in flight hold. */
export const keyAvailable = (a: KeyAllowance) => a.lease - a.unbatched - a.batched - a.reserved;

/**
 * What a shrinking write must leave in the key's slice: what calls in flight hold, and settled calls
 * the write does not carry (read after the write's batch was cut: the batch carries `batched`).
 */
export const keyStillNeeded = (a: KeyAllowance) => a.reserved + a.unbatched;

/** Held by calls in flight and settled but not yet written, on this replica. */
export const keyHeld = (a: KeyAllowance) => a.reserved + a.unbatched + a.batched;

/** The allowances of an account on this replica, by key. */
export class KeyAllowances {
  readonly keys = new Map<string, KeyInfo>();
  /** The current allowance of each limited lineage. */
  readonly current = new Map<string, KeyAllowance>();
  /** Allowances of past periods (or of a limit since removed) with calls still to settle or write. */
  readonly retired = new Set<KeyAllowance>();

  /**
   * The allowance a call with `keyId` reserves against: null when the key has no limit, undefined
   * when this replica does not know yet (a write must ask the database).
   */
  of(keyId: string): KeyAllowance | null | undefined {
    const info = this.keys.get(keyId);
    if (!info?.known) return undefined;
    return info.lineage === undefined ? null : (this.current.get(info.lineage) ?? null);
  }

  /**
   * The key must be read again (its limit changed): the next reservation asks the database. Without
   * a key, every key of the account. Whether any was known here.
   */
  forget(keyId?: string): boolean {
    const infos = keyId === undefined ? [...this.keys.values()] : [this.keys.get(keyId)];
    let any = false;
    for (const info of infos)
      if (info) {
        info.known = false;
        any = true;
      }
    return any;
  }

  /** Keys to carry in a write: every limited lineage's current allowance, and keys to learn. */
  ops(extra?: { keyId: string; need?: bigint; want?: bigint; keep?: boolean }): {
    keyId: string;
    grant?: { need: bigint; want: bigint };
    keep?: bigint;
  }[] {
    const out = new Map<string, { keyId: string; grant?: { need: bigint; want: bigint }; keep?: bigint }>();
    const lineageOf = new Map<string, string>();
    for (const [keyId, info] of this.keys) {
      if (info.lineage === undefined) continue;
      if (!lineageOf.has(info.lineage)) lineageOf.set(info.lineage, keyId);
    }
    for (const [lineage, keyId] of lineageOf) if (this.current.has(lineage)) out.set(keyId, { keyId });
    for (const [keyId, info] of this.keys) if (!info.known) out.set(keyId, { keyId });
    if (extra) {
      const op: { keyId: string; grant?: { need: bigint; want: bigint }; keep?: bigint } = {
        keyId: extra.keyId,
      };
      if (extra.need !== undefined && extra.want !== undefined)
        op.grant = { need: extra.need, want: extra.want };
      const a = this.of(extra.keyId);
      if (extra.keep && a) op.keep = keyStillNeeded(a);
      out.set(extra.keyId, op);
    }
    return [...out.values()];
  }

  /** Every allowance's keep: what a shrinking write (reclaim, return) leaves in each slice. */
  keeps(): { keyId: string; keep: bigint }[] {
    const out: { keyId: string; keep: bigint }[] = [];
    const done = new Set<string>();
    for (const [keyId, info] of this.keys) {
      const a = info.lineage !== undefined ? this.current.get(info.lineage) : undefined;
      if (!a || done.has(a.lineage)) continue;
      done.add(a.lineage);
      out.push({ keyId, keep: keyStillNeeded(a) });
    }
    return out;
  }

  /** Settled charges for the batch being cut: per lineage and period, moved to `batched`. */
  cut(): { allowance: KeyAllowance; charge: KeyCharge }[] {
    const out: { allowance: KeyAllowance; charge: KeyCharge }[] = [];
    for (const a of [...this.current.values(), ...this.retired]) {
      if (a.unbatched === 0n) continue;
      out.push({
        allowance: a,
        charge: { lineage: a.lineage, period: a.period, periodStart: a.periodStart, amount: a.unbatched },
      });
      a.batched += a.unbatched;
      a.unbatched = 0n;
    }
    return out;
  }

  /** The batch was written: its charges are the database's now. */
  confirm(cut: readonly { allowance: KeyAllowance; charge: KeyCharge }[]): void {
    for (const { allowance, charge } of cut) allowance.batched -= charge.amount;
    for (const a of this.retired)
      if (a.holds === 0 && a.unbatched === 0n && a.batched === 0n) this.retired.delete(a);
  }

  /** What the database said of each key after a write (at monotonic time `now`). */
  apply(results: readonly KeyResult[], now: number): void {
    for (const r of results) {
      const info: KeyInfo = { known: true };
      const previous = this.keys.get(r.keyId);
      const old = previous?.lineage !== undefined ? this.current.get(previous.lineage) : undefined;
      if (r.limit) {
        info.lineage = r.lineage;
        const l = r.limit;
        let a = this.current.get(r.lineage);
        if (a && (a.period !== l.period || a.periodStart.getTime() !== l.periodStart.getTime())) {
          this.retire(a);
          a = undefined;
        }
        if (!a) {
          a = {
            lineage: r.lineage,
            limit: l.amount,
            period: l.period,
            periodStart: l.periodStart,
            periodEndMs: l.periodEnd.getTime(),
            lease: 0n,
            reserved: 0n,
            holds: 0,
            unbatched: 0n,
            batched: 0n,
            spent: 0n,
            free: 0n,
            othersLeased: 0n,
            seenAt: now,
          };
          this.current.set(r.lineage, a);
        }
        Object.assign(a, {
          limit: l.amount,
          lease: l.lease,
          spent: l.spent,
          free: l.free,
          othersLeased: l.othersLeased,
          seenAt: now,
        });
      } else if (old && ![...this.keys].some(([k, i]) => k !== r.keyId && i.lineage === old.lineage)) {
        this.retire(old);
      }
      this.keys.set(r.keyId, info);
    }
  }

  private retire(a: KeyAllowance): void {
    this.current.delete(a.lineage);
    a.lease = 0n;
    if (a.holds > 0 || a.unbatched > 0n || a.batched > 0n) this.retired.add(a);
  }

  /** Nothing pending and no slice held: the account state may be dropped. */
  get idle(): boolean {
    return (
      this.retired.size === 0 && [...this.current.values()].every((a) => a.lease === 0n && a.holds === 0)
    );
  }
}
