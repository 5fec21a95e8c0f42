// Money is an exact integer count of micro-units (1e-6) of the one configured currency, held as a
// bigint and stored as BIGINT. This module is the only place that turns decimal strings into units
// and back, and the only place that rounds. Floats never touch an amount.
//
// Rounding, each in one function below:
// - the cost of a call is rounded UP to the next micro-unit (`ceilDiv`): never under-charged, at most
//   1e-6 over, and reservations (upper bounds) use the same rule so a settle never exceeds them;
// - an invoice line is rounded HALF UP (`roundHalfUp`): it is a bill after the fact, not a bound.
import { DECIMAL_AMOUNT } from '@berth/crds';
import { z } from 'zod';

/** Decimal places of one unit: amounts are micro-units of the currency. */
export const SCALE = 6;
export const UNITS_PER_CURRENCY = 1_000_000n;
/** Prices are per million tokens. */
const TOKENS_PER_PRICE = 1_000_000n;
const MS_PER_HOUR = 3_600_000n;

/**
 * "10.00" → 10_000_000n. Digits, an optional point and at most six decimals; no sign, exponent,
 * spaces or thousands separators. Returns undefined for anything else (the caller names the field).
 */
export function parseAmount(text: string): bigint | undefined {
  // At most 12 integer digits and 6 decimals: far below BIGINT's 9.2e18 micro-units even summed.
  const m = DECIMAL_AMOUNT.exec(text);
  if (!m) return undefined;
  const fraction = (m[2] ?? '').padEnd(SCALE, '0');
  return BigInt(m[1]!) * UNITS_PER_CURRENCY + BigInt(fraction);
}

/**
 * The most a balance may hold: the largest amount a request may name (12 integer digits, 6
 * decimals), well inside BIGINT (9.2e18 micro-units), so no sum of a balance and an amount overflows.
 */
export const MAX_BALANCE = 999_999_999_999_999_999n;

/** Like parseAmount, with an optional leading minus (adjustments). */
export function parseSignedAmount(text: string): bigint | undefined {
  const negative = text.startsWith('-');
  const v = parseAmount(negative ? text.slice(1) : text);
  return v === undefined ? undefined : negative ? -v : v;
}

/** 9_998_760n → "9.998760": always six decimals, a minus sign for negative amounts. */
export function formatAmount(units: bigint): string {
  const negative = units < 0n;
  const abs = negative ? -units : units;
  const whole = abs / UNITS_PER_CURRENCY;
  const fraction = (abs % UNITS_PER_CURRENCY).toString().padStart(SCALE, '0');
  return `${negative ? '-' : ''}${whole}.${fraction}`;
}

const POSITIVE = 'must be a positive decimal string with at most 6 decimals, e.g. "10.00"';
const NON_ZERO = 'must be a non-zero decimal string with at most 6 decimals, e.g. "-1.50"';

/** A positive amount in a request body: "10.00" → 10_000_000n. */
export const positiveAmount = z
  .string({ error: POSITIVE })
  .refine((v) => (parseAmount(v) ?? 0n) > 0n, POSITIVE)
  .transform((v) => parseAmount(v)!);

/** A non-zero signed amount ("-1.50"), for adjustments. */
export const signedAmount = z
  .string({ error: NON_ZERO })
  .refine((v) => (parseSignedAmount(v) ?? 0n) !== 0n, NON_ZERO)
  .transform((v) => parseSignedAmount(v)!);

/** ⌈n / d⌉ for n ≥ 0, d > 0. */
export function ceilDiv(n: bigint, d: bigint): bigint {
  return (n + d - 1n) / d;
}

/** n / d rounded half up, for n ≥ 0, d > 0. */
export function roundHalfUp(n: bigint, d: bigint): bigint {
  return (2n * n + d) / (2n * d);
}

// ── Token prices ─────────────────────────────────────────────────────────────────────────────────

/** A model's prices in micro-units per million tokens ("0.10" USD/MTok → 100_000n). */
export interface TokenPricing {
  inputPerMTok: bigint;
  outputPerMTok: bigint;
}

/** Decimal strings in USD (the currency) per million tokens, as the catalog holds them. */
export function parsePricing(p: { inputPerMTok: string; outputPerMTok: string }): TokenPricing | undefined {
  const inputPerMTok = parseAmount(p.inputPerMTok);
  const outputPerMTok = parseAmount(p.outputPerMTok);
  return inputPerMTok === undefined || outputPerMTok === undefined
    ? undefined
    : { inputPerMTok, outputPerMTok };
}

/** What a call costs: exact in token × price, rounded up to the micro-unit once per call. */
export function callCost(pricing: TokenPricing, promptTokens: number, completionTokens: number): bigint {
  const exact =
    BigInt(promptTokens) * pricing.inputPerMTok + BigInt(completionTokens) * pricing.outputPerMTok;
  return ceilDiv(exact, TOKENS_PER_PRICE);
}

/**
 * Tokens the chat template may add beyond the request's own bytes (a default system prompt, role
 * markers, special tokens): generous for the templates vLLM ships.
 */
export const TEMPLATE_TOKEN_ALLOWANCE = 256;
/** Completion bound when a request gives no max_tokens and its model no context length. */
export const DEFAULT_MAX_COMPLETION_TOKENS = 4096;

/**
 * An upper bound of a call's cost, reserved before it is forwarded. The prompt is bounded by the
 * request body's size in bytes: byte-level BPE and SentencePiece-with-byte-fallback tokenizers make
 * at most one token per byte, and the JSON around the messages more than covers per-message
 * markers. The completion is bounded by the request's limit (`maxTokens`, the largest of the limits
 * it gives: see elastic/limits.ts), else the model's context length, else
 * DEFAULT_MAX_COMPLETION_TOKENS — times the sequences generated (`n`, `best_of`).
 */
export function reservationBound(input: {
  pricing: TokenPricing;
  requestBytes: number;
  maxTokens?: number;
  contextLength?: number;
  sequences?: number;
}): bigint {
  const prompt = input.requestBytes + TEMPLATE_TOKEN_ALLOWANCE;
  const perSequence = input.maxTokens ?? input.contextLength ?? DEFAULT_MAX_COMPLETION_TOKENS;
  return callCost(input.pricing, prompt, perSequence * Math.max(1, input.sequences ?? 1));
}

// ── GPU time ─────────────────────────────────────────────────────────────────────────────────────

/** The amount of `gpuMs` GPU-milliseconds at `ratePerGpuHour` micro-units, rounded half up. */
export function gpuTimeAmount(gpuMs: bigint, ratePerGpuHour: bigint): bigint {
  return roundHalfUp(gpuMs * ratePerGpuHour, MS_PER_HOUR);
}

/** Milliseconds (divided by `per`, e.g. GPUs) as hours with six decimals, rounded half up ("2.500000"). */
export function formatHours(ms: bigint, per = 1n): string {
  return formatAmount(roundHalfUp(ms * UNITS_PER_CURRENCY, MS_PER_HOUR * per));
}
