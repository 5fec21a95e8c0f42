// Settings → Billing for a global key (`/api/billing/*`) and the same per account for the operator
// holding ADMIN_TOKEN (`/admin/accounts/{id}/billing/*`), plus credits, adjustments, the
// reconciliation check and a manual run of the weekly invoice job. Amounts are decimal strings
// with six decimals in the configured currency.
import type { Request, Response } from 'express';
import { z } from 'zod';
import type { Billing } from '../billing/index.ts';
import type { InvoiceLine } from '../billing/gpu-time.ts';
import type { InvoiceRecord } from '../billing/metering-repository.ts';
import { formatAmount, formatHours, positiveAmount, signedAmount } from '../billing/money.ts';
import { LEDGER_KINDS, type LedgerRow } from '../billing/repository.ts';
import { ApiError } from '../errors.ts';
import type { Routes } from '../http/routes.ts';
import { parse } from '../http/validate.ts';
import { simpleError, type Operation } from '../openapi.ts';
import { globalKey, globalKeyErrors } from './views.ts';

const DAY_MS = 86_400_000;

// ── Views ────────────────────────────────────────────────────────────────────────────────────────

const amount = z.string().describe('Decimal string with six decimals, e.g. "9.998760"');

const balanceView = z.object({
  balance: amount,
  currency: z.string(),
  paid: z.boolean().describe('The account was credited at least once'),
  freeQueriesRemaining: z.number().describe('Free Elastic queries left (0 once paid)'),
});

const entryView = z.object({
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

const viewEntry = (e: LedgerRow): z.infer<typeof entryView> => ({
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

function accountViews(billing: Billing): AccountView[] {
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

const accountNotFound = () => new ApiError('not_found', { message: 'Account not found' });

async function issuedInvoice(
  billing: Billing,
  accountId: string,
  id: string,
): Promise<z.infer<typeof invoiceView>> {
  const found = await billing.gpu.invoice(accountId, id);
  if (!found) throw new ApiError('not_found', { message: 'Invoice not found' });
  return { ...viewInvoice(found), lines: found.lines.map(viewLine) };
}

const invoiceResponses = {
  200: { description: 'The invoice', schema: invoiceView },
  404: { description: 'No such invoice in this account', schema: simpleError },
};

// ── /api/billing (global key) ────────────────────────────────────────────────────────────────────

/** Settings → Billing: the caller's own account, with a global key. */
export function registerBillingRoutes(routes: Routes, deps: { billing: Billing }): void {
  for (const v of accountViews(deps.billing)) {
    routes.add(
      {
        method: 'get',
        path: `/api/billing/${v.path}`,
        tag: 'billing',
        auth: globalKey,
        summary: v.summary,
        ...(v.description ? { description: v.description } : {}),
        responses: {
          200: { description: v.returns, schema: v.response },
          ...v.errors,
          ...globalKeyErrors,
        },
      },
      async ({ caller, req, res }) => {
        res.json(await v.handle(caller.accountId, req));
      },
    );
  }

  routes.add(
    {
      method: 'get',
      path: '/api/billing/invoices/{id}',
      tag: 'billing',
      auth: globalKey,
      summary: 'An issued invoice with its lines (one per endpoint)',
      responses: { ...invoiceResponses, ...globalKeyErrors },
    },
    async ({ caller, params, res }) => {
      res.json(await issuedInvoice(deps.billing, caller.accountId, params.id));
    },
  );
}

// ── /admin (ADMIN_TOKEN) ─────────────────────────────────────────────────────────────────────────

const creditBody = z.strictObject({
  amount: positiveAmount.describe('Decimal string, e.g. "10.00"'),
  reference: z
    .string()
    .trim()
    .min(1, 'must not be empty')
    .max(200, 'must be at most 200 characters')
    .optional(),
});
const adjustmentBody = z.strictObject({
  kind: z.enum(['refund', 'adjustment'], { error: 'must be refund or adjustment' }),
  amount: signedAmount.describe('Decimal string; refunds positive, adjustments signed'),
  reference: z.string().trim().min(1, 'must not be empty').max(200, 'must be at most 200 characters'),
});
const postedView = z.object({
  entry: entryView,
  balance: amount.describe('The balance right after this entry'),
});

const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,200}$/;

function idempotencyKey(req: Request): string {
  const key = req.get('idempotency-key');
  if (!key || !IDEMPOTENCY_KEY.test(key)) {
    throw new ApiError('validation_error', {
      message: 'The Idempotency-Key header is required: 1 to 200 visible ASCII characters',
      param: 'Idempotency-Key',
    });
  }
  return key;
}

const accountErrors = { 404: { description: 'No such account', schema: simpleError } };
const postedResponses = {
  201: { description: 'The ledger entry and the balance after it', schema: postedView },
  400: { description: 'Invalid body or missing Idempotency-Key', schema: simpleError },
};

/** Credits, adjustments, every account's billing views, reconciliation, the invoice job. */
export function registerBillingAdminRoutes(routes: Routes, deps: { billing: Billing }): void {
  const { billing } = deps;

  /** Posts an entry once per Idempotency-Key: 201 with it (again, replayed, for the same key). */
  const post = async (
    res: Response,
    accountId: string,
    idempotencyKey: string,
    entry: { kind: 'credit' | 'refund' | 'adjustment'; amount: bigint; reference: string | null },
  ) => {
    const r = await billing.ledger.post(accountId, { ...entry, idempotencyKey });
    if (r.status === 'no_account') throw accountNotFound();
    if (r.status === 'conflict') throw new ApiError('idempotency_conflict');
    if (r.status === 'insufficient')
      throw new ApiError('balance_conflict', {
        message: `The balance not held by calls in flight is ${formatAmount(r.available)}, too low for this adjustment`,
      });
    if (r.status === 'replayed') res.setHeader('idempotent-replayed', 'true');
    res.status(201).json({ entry: viewEntry(r.entry), balance: formatAmount(r.entry.balanceAfter) });
  };

  routes.add(
    {
      method: 'post',
      path: '/admin/accounts/{id}/credits',
      tag: 'admin',
      auth: 'admin',
      summary: 'Credit an account (prepaid top-up), idempotent on the Idempotency-Key header',
      description:
        'The same Idempotency-Key again answers 201 with the first entry and `Idempotent-Replayed: true`, crediting nothing; with a different amount or reference it answers 409.',
      body: creditBody,
      responses: {
        ...postedResponses,
        409: { description: 'The Idempotency-Key was used for another request', schema: simpleError },
        ...accountErrors,
      },
    },
    async ({ params, body, req, res }) => {
      const key = idempotencyKey(req); // a missing header is named before the body's faults
      const { amount, reference } = body();
      await post(res, params.id, key, { kind: 'credit', amount, reference: reference ?? null });
    },
  );

  routes.add(
    {
      method: 'post',
      path: '/admin/accounts/{id}/adjustments',
      tag: 'admin',
      auth: 'admin',
      summary: 'A refund (positive) or a signed adjustment, idempotent on the Idempotency-Key header',
      description:
        'Refunds and adjustments do not make an account "paid". A negative adjustment may not take more than the balance no call in flight holds (409).',
      body: adjustmentBody,
      responses: {
        ...postedResponses,
        409: { description: 'Idempotency-Key reused, or the balance is too low', schema: simpleError },
        ...accountErrors,
      },
    },
    async ({ params, body, req, res }) => {
      const key = idempotencyKey(req);
      const entry = body();
      if (entry.kind === 'refund' && entry.amount < 0n)
        throw new ApiError('validation_error', {
          message: 'Invalid request body: amount: a refund must be positive',
          param: 'amount',
        });
      await post(res, params.id, key, entry);
    },
  );

  for (const v of accountViews(billing)) {
    routes.add(
      {
        method: 'get',
        path: `/admin/accounts/{id}/billing/${v.path}` as `/admin/accounts/{id}/billing/${string}`,
        tag: 'admin',
        auth: 'admin',
        summary: v.adminSummary,
        responses: {
          200: { description: v.returns, schema: v.response },
          ...v.errors,
          ...accountErrors,
        },
      },
      async ({ params, req, res }) => {
        // Views of an empty account are empty: say "not found" only for accounts that do not exist.
        if (v.path !== 'balance' && !(await billing.ledger.balance(params.id))) throw accountNotFound();
        res.json(await v.handle(params.id, req));
      },
    );
  }

  routes.add(
    {
      method: 'get',
      path: '/admin/accounts/{id}/billing/invoices/{invoiceId}',
      tag: 'admin',
      auth: 'admin',
      summary: 'An issued invoice of an account',
      responses: invoiceResponses,
    },
    async ({ params, res }) => {
      res.json(await issuedInvoice(billing, params.id, params.invoiceId));
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/admin/billing/reconciliation',
      tag: 'admin',
      auth: 'admin',
      summary: 'Check that every balance is the sum of its ledger and every lent part the sum of its leases',
      responses: {
        200: {
          description: '`ok` false lists the accounts that do not add up',
          schema: z.object({
            ok: z.boolean(),
            accounts: z.number(),
            mismatches: z.array(
              z.object({
                accountId: z.string(),
                balance: amount.nullable(),
                ledgerTotal: amount,
                lastBalanceAfter: amount.nullable(),
                leased: amount.nullable(),
                leaseTotal: amount,
              }),
            ),
          }),
        },
      },
    },
    async ({ res }) => {
      const r = await billing.ledger.reconcile();
      const opt = (v: bigint | null) => (v === null ? null : formatAmount(v));
      res.json({
        ok: r.ok,
        accounts: r.accounts,
        mismatches: r.mismatches.map((m) => ({
          accountId: m.accountId,
          balance: opt(m.balance),
          ledgerTotal: formatAmount(m.ledgerTotal),
          lastBalanceAfter: opt(m.lastBalanceAfter),
          leased: opt(m.leased),
          leaseTotal: formatAmount(m.leaseTotal),
        })),
      });
    },
  );

  routes.add(
    {
      method: 'post',
      path: '/admin/billing/invoices/run',
      tag: 'admin',
      auth: 'admin',
      summary:
        'Issue the invoices of every complete week not yet invoiced now (the weekly job does it on Mondays)',
      responses: {
        200: {
          description: 'The weeks issued',
          schema: z.object({ weeks: z.array(z.string()), invoices: z.number() }),
        },
      },
    },
    async ({ res }) => {
      const r = await billing.gpu.issueInvoices();
      res.json({ weeks: r.weeks.map((w) => w.toISOString()), invoices: r.invoices });
    },
  );
}
