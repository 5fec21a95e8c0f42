// How big a slice of an account's balance one API replica may hold. Pure, so it is table-tested and
// the repository applies it under the account's row lock.

/**
 * What to lend a replica that needs `need` now (0 for a top-up) and would like `want` in all, out
 * of `available` (the balance no replica holds): 0 when `need` does not fit; otherwise `need` plus
 * at most half of what would remain, so a small balance is never swallowed whole by one replica
 * and the next one finds something without asking the first to give back.
 */
export function leaseGrant(available: bigint, need: bigint, want: bigint): bigint {
  if (need > available || available <= 0n) return 0n;
  const extra = want > need ? want - need : 0n;
  const spare = (available - need) / 2n;
  return need + (extra < spare ? extra : spare);
}

/**
 * What a replica would like to hold for an account: enough for `horizonMs` at its recent rate of
 * spending (`ratePerSecond`, micro-units per second), and at least `minCalls` calls of the size it
 * is reserving now (`callSize`) — so a busy account costs one write per flush, not one per call.
 */
export function leaseWant(input: {
  callSize: bigint;
  ratePerSecond: bigint;
  horizonMs: number;
  minCalls: bigint;
}): bigint {
  const byRate = (input.ratePerSecond * BigInt(input.horizonMs)) / 1000n;
  const byCalls = input.callSize * input.minCalls;
  return byRate > byCalls ? byRate : byCalls;
}
