// Billing for the operator holding ADMIN_TOKEN: credits, adjustments, every account's billing views
// (`/admin/accounts/{id}/billing/*`), the reconciliation check and a manual run of the weekly invoice
// job.
import type { Request, Response } from 'express';
import { z } from 'zod';
import type { Routes } from '../http/routes.ts';
import { simpleError } from '../http/openapi.ts';
import { ApiError } from '../platform/errors.ts';
import { formatAmount, MAX_BALANCE, positiveAmount, signedAmount } from '../platform/money.ts';
import type { Billing } from './index.ts';
import {
  accountNotFound,
  accountViews,
  amount,
  entryView,
  invoiceResponses,
  issuedInvoice,
  viewEntry,
} from './views.ts';
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
    if (r.status === 'too_large')
      throw new ApiError('balance_conflict', {
        message: `The balance is ${formatAmount(r.balance)}; this entry would take it past the largest a balance may hold (${formatAmount(MAX_BALANCE)})`,
      });
    if (r.status === 'replayed') res.setHeader('idempotent-replayed', 'true');
    else if (entry.amount > 0n) billing.wallet.balanceGrew(accountId);
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
        409: {
          description:
            'The Idempotency-Key was used for another request, or the balance would pass the largest it may hold (999999999999.999999)',
          schema: simpleError,
        },
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
