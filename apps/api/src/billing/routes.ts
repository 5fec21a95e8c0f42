// Settings → Billing for a global key: `/api/billing/*`, the caller's own account.
import { globalKey, globalKeyErrors } from '../http/auth.ts';
import type { Routes } from '../http/routes.ts';
import type { Billing } from './index.ts';
import { accountViews, invoiceResponses, issuedInvoice } from './views.ts';
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
