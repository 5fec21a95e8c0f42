// What the billing routes show and read: the views of balances, ledger entries, usage and invoices,
// their queries, and an account's billing views, which both `/api/billing/*` (./routes.ts) and
// `/admin/accounts/{id}/billing/*` (./admin-routes.ts) serve. Amounts are decimal strings with six
// decimals in the configured currency.
import type { Request } from 'express';
import { z } from 'zod';
import type { Billing } from './index.ts';
import type { InvoiceLine } from './gpu-time.ts';
import type { InvoiceRecord } from './metering-repository.ts';
import { formatAmount, formatHours } from '../platform/money.ts';
import { LEDGER_KINDS, type LedgerRow } from './repository.ts';
import { ApiError } from '../platform/errors.ts';
import { parse } from '../http/validate.ts';
import { simpleError, type Operation } from '../http/openapi.ts';

const DAY_MS = 86_400_000;

// ── Views ────────────────────────────────────────────────────────────────────────────────────────

export const amount = z.string().describe('Decimal string with six decimals, e.g. "9.998760"');

const balanceView = z.object({
  balance: amount,
  currency: z.string(),
  paid: z.boolean().describe('The account was credited at least once'),
  freeQueriesRemaining: z.number().describe('Free Elastic queries left (0 once paid)'),
});

export const entryView = z.object({
  id: z.string().describe('Increasing; pass as `before` for older entries'),
  kind: z.enum(LEDGER_KINDS),
  amount: amount.describe('Signed: credits and refunds positive, charges negative'),
  balanceAfter: amount,
  reference: z.string().nullable(),
  createdAt: z.string(),
});

const usageView = z.object({
  day: z.string().describe('UTC day, YYYY-MM-DD'),
  model: z.string(),
  requests: z.number(),
  freeRequests: z.number(),
  promptTokens: z.number(),
  completionTokens: z.number(),
  cost: amount,
});

const lineView = z.object({
  endpointId: z.string(),
  instanceType: z.string(),
  gpuType: z.string(),
  gpuCount: z.number().describe('GPUs per replica'),
  hours: z.string().describe('Replica-hours: hours one replica of gpuCount GPUs ran'),
  gpuHours: z.string(),
  ratePerGpuHour: amount,
  amount,
});

const invoiceSummary = z.object({
  id: z.string(),
  status: z.literal('issued'),
  periodStart: z.string(),
  periodEnd: z.string(),
  currency: z.string(),
  total: amount,
  issuedAt: z.string(),
});
const invoiceView = invoiceSummary.extend({ lines: z.array(lineView) });
const upcomingView = z.object({
  status: z.literal('upcoming'),
  periodStart: z.string(),
  periodEnd: z.string(),
  asOf: z.string(),
  currency: z.string(),
  total: amount,
  lines: z.array(lineView),
});

export const viewEntry = (e: LedgerRow): z.infer<typeof entryView> => ({
  id: String(e.id),
  kind: e.kind,
  amount: formatAmount(e.amount),
  balanceAfter: formatAmount(e.balanceAfter),
  reference: e.reference,
  createdAt: e.createdAt.toISOString(),
});

const viewLine = (l: InvoiceLine): z.infer<typeof lineView> => ({
  endpointId: l.endpointId,
  instanceType: l.instanceType,
  gpuType: l.gpuType,
  gpuCount: l.gpusPerReplica,
  hours: formatHours(l.gpuMs, BigInt(l.gpusPerReplica)),
  gpuHours: formatHours(l.gpuMs),
  ratePerGpuHour: formatAmount(l.ratePerGpuHour),
  amount: formatAmount(l.amount),
});

const viewInvoice = (i: InvoiceRecord): z.infer<typeof invoiceSummary> => ({
  id: i.id,
  status: 'issued',
  periodStart: i.periodStart.toISOString(),
  periodEnd: i.periodEnd.toISOString(),
  currency: i.currency,
  total: formatAmount(i.total),
  issuedAt: i.issuedAt.toISOString(),
});

// ── Queries ──────────────────────────────────────────────────────────────────────────────────────

const instant = z.iso
  .datetime({ offset: true, error: 'must be an ISO 8601 date-time, e.g. 2026-11-23T00:00:00Z' })
  .transform((v) => new Date(v));
const day = z.iso.date({ error: 'must be a date, YYYY-MM-DD' }).transform((v) => new Date(`${v}T00:00:00Z`));

const ledgerQuery = z.strictObject({
  kind: z
    .string()
    .transform((v) => v.split(','))
    .pipe(z.array(z.enum(LEDGER_KINDS, { error: `must be ${LEDGER_KINDS.join(', ')} (comma-separated)` })))
    .optional()
    .describe('Only these kinds, comma-separated'),
  from: instant.optional().describe('Entries at or after this instant'),
  to: instant.optional().describe('Entries before this instant'),
  before: z
    .string()
    .regex(/^\d{1,18}$/, 'must be an entry id from a previous page')
    .transform((v) => BigInt(v))
    .optional(),
  limit: z.coerce
    .number({ error: 'must be a number' })
    .int('must be a whole number')
    .min(1, 'must be between 1 and 200')
    .max(200, 'must be between 1 and 200')
    .default(50),
});

const usageQuery = z
  .strictObject({
    from: day.optional().describe('First UTC day (default: 29 days before `to`)'),
    to: day.optional().describe('Last UTC day, included (default: today)'),
  })
  .transform((q) => {
    const to = q.to ?? new Date(Math.floor(Date.now() / DAY_MS) * DAY_MS);
    return { from: q.from ?? new Date(to.getTime() - 29 * DAY_MS), to };
  })
  .refine((q) => q.from <= q.to, { message: 'must not be after `to`', path: ['from'] })
  .refine((q) => q.to.getTime() - q.from.getTime() <= 366 * DAY_MS, {
    message: 'the range may span at most 367 days',
    path: ['from'],
  });

// ── Views, one handler each for the key and admin routes ─────────────────────────────────────────

const ledgerResponse = z.object({
  data: z.array(entryView).describe('Newest first'),
  nextBefore: z.string().nullable().describe('Pass as `before` for the next page; null on the last'),
});
const usageResponse = z.object({
  from: z.string(),
  to: z.string(),
  currency: z.string(),
  data: z.array(usageView).describe('Per UTC day and model, oldest first'),
});
const invoicesResponse = z.object({
  data: z.array(invoiceSummary).describe('Issued invoices, newest first'),
  upcoming: upcomingView.describe('The running week so far'),
});

const badQuery = {
  400: { description: 'A query parameter is invalid (named in the message)', schema: simpleError },
};

/**
 * An account's billing views: `/api/billing/<path>` for the caller's own account and
 * `/admin/accounts/{id}/billing/<path>` for any account.
 */
interface AccountView {
  path: 'balance' | 'ledger' | 'usage' | 'invoices';
  summary: string;
  adminSummary: string;
  description?: string;
  /** The 200 response: its description and schema. */
  returns: string;
  response: z.ZodType;
  /** Its other answers (400 for a bad query). */
  errors?: Operation['responses'];
  handle(accountId: string, req: Request): Promise<unknown>;
}

export function accountViews(billing: Billing): AccountView[] {
  return [
    {
      path: 'balance',
      summary: 'Prepaid balance, currency, paid state and free queries left',
      adminSummary: 'Balance of an account',
      description:
        'The balance includes what API replicas have reserved for calls in flight and is up to BILLING_FLUSH_INTERVAL_MS behind calls just settled.',
      returns: 'The balance',
      response: balanceView,
      async handle(accountId) {
        const b = await billing.ledger.balance(accountId);
        if (!b) throw accountNotFound();
        return {
          balance: formatAmount(b.balance),
          currency: billing.currency,
          paid: b.paid,
          freeQueriesRemaining: b.freeQueriesRemaining,
        } satisfies z.infer<typeof balanceView>;
      },
    },
    {
      path: 'ledger',
      summary: 'Ledger entries, newest first: ?kind=credit,charge&from=…&to=…&before=…&limit=50',
      adminSummary: 'Ledger of an account (same query as /api/billing/ledger)',
      returns: 'One page of entries',
      response: ledgerResponse,
      errors: badQuery,
      async handle(accountId, req) {
        const q = parse(ledgerQuery, req.query, 'query');
        const page = await billing.ledger.entries(accountId, {
          ...(q.kind ? { kinds: q.kind } : {}),
          ...(q.from ? { from: q.from } : {}),
          ...(q.to ? { to: q.to } : {}),
          ...(q.before !== undefined ? { before: q.before } : {}),
          limit: q.limit,
        });
        return {
          data: page.entries.map(viewEntry),
          nextBefore: page.next === undefined ? null : String(page.next),
        } satisfies z.infer<typeof ledgerResponse>;
      },
    },
    {
      path: 'usage',
      summary: 'Tokens and cost per model and UTC day: ?from=YYYY-MM-DD&to=YYYY-MM-DD (default: 30 days)',
      adminSummary: 'Usage of an account (same query as /api/billing/usage)',
      returns: 'Usage',
      response: usageResponse,
      errors: badQuery,
      async handle(accountId, req) {
        const q = parse(usageQuery, req.query, 'query');
        const rows = await billing.ledger.usage(accountId, {
          from: q.from,
          to: new Date(q.to.getTime() + DAY_MS),
        });
        return {
          from: q.from.toISOString().slice(0, 10),
          to: q.to.toISOString().slice(0, 10),
          currency: billing.currency,
          data: rows.map((r) => ({
            day: r.day,
            model: r.model,
            requests: r.requests,
            freeRequests: r.freeRequests,
            promptTokens: Number(r.promptTokens),
            completionTokens: Number(r.completionTokens),
            cost: formatAmount(r.cost),
          })),
        } satisfies z.infer<typeof usageResponse>;
      },
    },
    {
      path: 'invoices',
      summary: 'Weekly invoices of dedicated GPU time, and the running week as `upcoming`',
      adminSummary: 'Invoices of an account',
      returns: 'Invoices',
      response: invoicesResponse,
      async handle(accountId) {
        const [issued, upcoming] = await Promise.all([
          billing.gpu.invoices(accountId),
          billing.gpu.upcoming(accountId),
        ]);
        return {
          data: issued.map(viewInvoice),
          upcoming: {
            status: 'upcoming' as const,
            periodStart: upcoming.periodStart.toISOString(),
            periodEnd: upcoming.periodEnd.toISOString(),
            asOf: upcoming.asOf.toISOString(),
            currency: billing.currency,
            total: formatAmount(upcoming.total),
            lines: upcoming.lines.map(viewLine),
          },
        } satisfies z.infer<typeof invoicesResponse>;
      },
    },
  ];
}

export const accountNotFound = () => new ApiError('not_found', { message: 'Account not found' });

export async function issuedInvoice(
  billing: Billing,
  accountId: string,
  id: string,
): Promise<z.infer<typeof invoiceView>> {
  const found = await billing.gpu.invoice(accountId, id);
  if (!found) throw new ApiError('not_found', { message: 'Invoice not found' });
  return { ...viewInvoice(found), lines: found.lines.map(viewLine) };
}

export const invoiceResponses = {
  200: { description: 'The invoice', schema: invoiceView },
  404: { description: 'No such invoice in this account', schema: simpleError },
};
