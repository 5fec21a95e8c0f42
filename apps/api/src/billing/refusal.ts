// A refused reservation as the caller sees it: 402 with the spec's message for a balance too low, or
// the key's own code and message for a spend limit reached; either way the body says what the call
// needed and what calls in flight hold, so "held" is never mistaken for "spent".
import { ApiError } from '../platform/errors.ts';
import { formatAmount } from '../platform/money.ts';
import type { Refusal } from './wallet-account.ts';

/** The 402 for a refused reservation (the caller throws it before any upstream work). */
export function refusalError(r: Refusal, currency?: string): ApiError {
  const money = (v: bigint) => formatAmount(v < 0n ? 0n : v);
  const common = {
    needed: money(r.needed),
    held_in_flight: money(r.held),
    waited_ms: Math.round(r.waitedMs),
    ...(currency ? { currency } : {}),
  };
  if (r.reason === 'balance')
    return new ApiError('insufficient_balance', {
      details: { balance: { available: money(r.available), ...common } },
    });
  const limit = `${money(r.limit)}${currency ? ` ${currency}` : ''} per ${r.period}`;
  return new ApiError('spend_limit_reached', {
    message: `This API key has reached its spend limit (${limit}; ${money(r.spent)} spent, ${money(r.held)} held by calls in flight); it resets at ${r.resetsAt.toISOString()}. Raise or remove the limit in Settings → Keys`,
    details: {
      spend_limit: {
        key: r.keyId,
        amount: money(r.limit),
        period: r.period,
        spent: money(r.spent),
        resets_at: r.resetsAt.toISOString(),
        ...common,
      },
    },
  });
}
