// Settings → Billing for a global key (`/api/billing/*`) and the same per account for the operator
// holding ADMIN_TOKEN (`/admin/accounts/{id}/billing/*`), plus credits, adjustments, the
// reconciliation check and a manual run of the weekly invoice job. Amounts are decimal strings
// with six decimals in the configured currency.
import type { Request, Router } from 'express';
import { z } from 'zod';
import type { Billing } from '../billing/index.ts';
import type { InvoiceLine } from '../billing/gpu-time.ts';
import type { InvoiceRecord } from '../billing/metering-repository.ts';
import { formatAmount, formatHours, positiveAmount, signedAmount } from '../billing/money.ts';
import { LEDGER_KINDS, type LedgerRow } from '../billing/repository.ts';
import { ApiError } from '../errors.ts';
import { principalOf, requireKey } from '../http/auth.ts';
import { parse } from '../http/validate.ts';
import type { KeyService } from '../keys/service.ts';
import type { ApiDoc } from '../openapi.ts';
import { simpleError } from '../openapi.ts';

const MANAGE = ['global'] as const;
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

// ── Handlers, shared by the key and admin routes ─────────────────────────────────────────────────

interface Handlers {
  balance(accountId: string): Promise<z.infer<typeof balanceView>>;
  ledger(
    accountId: string,
    req: Request,
  ): Promise<{ data: z.infer<typeof entryView>[]; nextBefore: string | null }>;
  usage(accountId: string, req: Request): Promise<unknown>;
  invoices(accountId: string): Promise<unknown>;
  invoice(accountId: string, id: string): Promise<z.infer<typeof invoiceView>>;
}

function handlers(billing: Billing): Handlers {
  const notFound = () => new ApiError('not_found', { message: 'Account not found' });
  return {
    async balance(accountId) {
      const b = await billing.ledger.balance(accountId);
      if (!b) throw notFound();
      return {
        balance: formatAmount(b.balance),
        currency: billing.currency,
        paid: b.paid,
        freeQueriesRemaining: b.freeQueriesRemaining,
      };
    },
    async ledger(accountId, req) {
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
      };
    },
    async usage(accountId, req) {
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
      };
    },
    async invoices(accountId) {
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
      };
    },
    async invoice(accountId, id) {
      const found = await billing.gpu.invoice(accountId, id);
      if (!found) throw new ApiError('not_found', { message: 'Invoice not found' });
      return { ...viewInvoice(found), lines: found.lines.map(viewLine) };
    },
  };
}

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

// ── /api/billing (global key) ────────────────────────────────────────────────────────────────────

/** Settings → Billing: the caller's own account, with a global key. */
export function registerBillingRoutes(
  router: Router,
  doc: ApiDoc,
  deps: { keys: KeyService; billing: Billing },
): void {
  const auth = requireKey(deps.keys, MANAGE);
  const h = handlers(deps.billing);
  const errors = {
    401: { description: 'Missing, malformed or revoked key', schema: simpleError },
    403: { description: 'The key is not a global key', schema: simpleError },
  };
  const account = (res: Parameters<typeof principalOf>[0]) => principalOf(res).accountId;

  doc.add({
    method: 'get',
    path: '/api/billing/balance',
    tag: 'billing',
    auth: 'key',
    scopes: MANAGE,
    summary: 'Prepaid balance, currency, paid state and free queries left',
    description:
      'The balance includes what API replicas have reserved for calls in flight and is up to BILLING_FLUSH_INTERVAL_MS behind calls just settled.',
    responses: { 200: { description: 'The balance', schema: balanceView }, ...errors },
  });
  router.get('/billing/balance', auth, async (_req, res) => {
    res.json(await h.balance(account(res)));
  });

  doc.add({
    method: 'get',
    path: '/api/billing/ledger',
    tag: 'billing',
    auth: 'key',
    scopes: MANAGE,
    summary: 'Ledger entries, newest first: ?kind=credit,charge&from=…&to=…&before=…&limit=50',
    responses: {
      200: { description: 'One page of entries', schema: ledgerResponse },
      400: { description: 'A query parameter is invalid (named in the message)', schema: simpleError },
      ...errors,
    },
  });
  router.get('/billing/ledger', auth, async (req, res) => {
    res.json(await h.ledger(account(res), req));
  });

  doc.add({
    method: 'get',
    path: '/api/billing/usage',
    tag: 'billing',
    auth: 'key',
    scopes: MANAGE,
    summary: 'Tokens and cost per model and UTC day: ?from=YYYY-MM-DD&to=YYYY-MM-DD (default: 30 days)',
    responses: {
      200: { description: 'Usage', schema: usageResponse },
      400: { description: 'A query parameter is invalid (named in the message)', schema: simpleError },
      ...errors,
    },
  });
  router.get('/billing/usage', auth, async (req, res) => {
    res.json(await h.usage(account(res), req));
  });

  doc.add({
    method: 'get',
    path: '/api/billing/invoices',
    tag: 'billing',
    auth: 'key',
    scopes: MANAGE,
    summary: 'Weekly invoices of dedicated GPU time, and the running week as `upcoming`',
    responses: { 200: { description: 'Invoices', schema: invoicesResponse }, ...errors },
  });
  router.get('/billing/invoices', auth, async (_req, res) => {
    res.json(await h.invoices(account(res)));
  });

  doc.add({
    method: 'get',
    path: '/api/billing/invoices/{id}',
    tag: 'billing',
    auth: 'key',
    scopes: MANAGE,
    summary: 'An issued invoice with its lines (one per endpoint)',
    responses: {
      200: { description: 'The invoice', schema: invoiceView },
      404: { description: 'No such invoice in this account', schema: simpleError },
      ...errors,
    },
  });
  router.get('/billing/invoices/:id', auth, async (req, res) => {
    res.json(await h.invoice(account(res), String(req.params.id)));
  });
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

/** Credits, adjustments, every account's billing views, reconciliation, the invoice job. */
export function registerBillingAdminRoutes(router: Router, doc: ApiDoc, deps: { billing: Billing }): void {
  const { billing } = deps;
  const h = handlers(billing);
  const accountErrors = { 404: { description: 'No such account', schema: simpleError } };

  const post = async (
    accountId: string,
    key: string,
    entry: { kind: 'credit' | 'refund' | 'adjustment'; amount: bigint; reference: string | null },
  ) => {
    const r = await billing.ledger.post(accountId, { ...entry, idempotencyKey: key });
    if (r.status === 'no_account') throw new ApiError('not_found', { message: 'Account not found' });
    if (r.status === 'conflict') throw new ApiError('idempotency_conflict');
    if (r.status === 'insufficient')
      throw new ApiError('balance_conflict', {
        message: `The balance not held by calls in flight is ${formatAmount(r.available)}, too low for this adjustment`,
      });
    return {
      replayed: r.status === 'replayed',
      body: { entry: viewEntry(r.entry), balance: formatAmount(r.entry.balanceAfter) },
    };
  };

  doc.add({
    method: 'post',
    path: '/admin/accounts/{id}/credits',
    tag: 'admin',
    auth: 'admin',
    summary: 'Credit an account (prepaid top-up), idempotent on the Idempotency-Key header',
    description:
      'The same Idempotency-Key again answers 201 with the first entry and `Idempotent-Replayed: true`, crediting nothing; with a different amount or reference it answers 409.',
    body: creditBody,
    responses: {
      201: { description: 'The ledger entry and the balance after it', schema: postedView },
      400: { description: 'Invalid body or missing Idempotency-Key', schema: simpleError },
      409: { description: 'The Idempotency-Key was used for another request', schema: simpleError },
      ...accountErrors,
    },
  });
  router.post('/accounts/:id/credits', async (req, res) => {
    const key = idempotencyKey(req);
    const body = parse(creditBody, req.body);
    const r = await post(String(req.params.id), key, {
      kind: 'credit',
      amount: body.amount,
      reference: body.reference ?? null,
    });
    if (r.replayed) res.setHeader('idempotent-replayed', 'true');
    res.status(201).json(r.body);
  });

  doc.add({
    method: 'post',
    path: '/admin/accounts/{id}/adjustments',
    tag: 'admin',
    auth: 'admin',
    summary: 'A refund (positive) or a signed adjustment, idempotent on the Idempotency-Key header',
    description:
      'Refunds and adjustments do not make an account "paid". A negative adjustment may not take more than the balance no call in flight holds (409).',
    body: adjustmentBody,
    responses: {
      201: { description: 'The ledger entry and the balance after it', schema: postedView },
      400: { description: 'Invalid body or missing Idempotency-Key', schema: simpleError },
      409: { description: 'Idempotency-Key reused, or the balance is too low', schema: simpleError },
      ...accountErrors,
    },
  });
  router.post('/accounts/:id/adjustments', async (req, res) => {
    const key = idempotencyKey(req);
    const body = parse(adjustmentBody, req.body);
    if (body.kind === 'refund' && body.amount < 0n)
      throw new ApiError('validation_error', {
        message: 'Invalid request body: amount: a refund must be positive',
        param: 'amount',
      });
    const r = await post(String(req.params.id), key, body);
    if (r.replayed) res.setHeader('idempotent-replayed', 'true');
    res.status(201).json(r.body);
  });

  const views: [string, string, z.ZodType, (accountId: string, req: Request) => Promise<unknown>][] = [
    ['balance', 'Balance of an account', balanceView, (a) => h.balance(a)],
    ['ledger', 'Ledger of an account (same query as /api/billing/ledger)', ledgerResponse, h.ledger],
    ['usage', 'Usage of an account (same query as /api/billing/usage)', usageResponse, h.usage],
    ['invoices', 'Invoices of an account', invoicesResponse, (a) => h.invoices(a)],
  ];
  for (const [name, summary, schema, handler] of views) {
    doc.add({
      method: 'get',
      path: `/admin/accounts/{id}/billing/${name}`,
      tag: 'admin',
      auth: 'admin',
      summary,
      responses: { 200: { description: summary, schema }, ...accountErrors },
    });
    router.get(`/accounts/:id/billing/${name}`, async (req, res) => {
      const accountId = String(req.params.id);
      // Views of an empty account are empty: say "not found" only for accounts that do not exist.
      if (name !== 'balance' && !(await billing.ledger.balance(accountId)))
        throw new ApiError('not_found', { message: 'Account not found' });
      res.json(await handler(accountId, req));
    });
  }

  doc.add({
    method: 'get',
    path: '/admin/accounts/{id}/billing/invoices/{invoiceId}',
    tag: 'admin',
    auth: 'admin',
    summary: 'An issued invoice of an account',
    responses: {
      200: { description: 'The invoice', schema: invoiceView },
      404: { description: 'No such invoice in this account', schema: simpleError },
    },
  });
  router.get('/accounts/:id/billing/invoices/:invoiceId', async (req, res) => {
    res.json(await h.invoice(String(req.params.id), String(req.params.invoiceId)));
  });

  doc.add({
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
  });
  router.get('/billing/reconciliation', async (_req, res) => {
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
  });

  doc.add({
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
  });
  router.post('/billing/invoices/run', async (_req, res) => {
    const r = await billing.gpu.issueInvoices();
    res.json({ weeks: r.weeks.map((w) => w.toISOString()), invoices: r.invoices });
  });
}
