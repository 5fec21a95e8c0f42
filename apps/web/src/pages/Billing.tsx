import { useEffect, useState } from 'react';
import {
  api,
  type ApiKey,
  type Balance,
  type InvoiceSummary,
  type LedgerEntry,
  type Upcoming,
  type UsageRow,
} from '../api.ts';
import { ErrorText, TableScroll, formatDate } from '../ui.tsx';

export function Billing() {
  const [balance, setBalance] = useState<Balance | null>(null);
  const [ledger, setLedger] = useState<LedgerEntry[] | null>(null);
  const [usage, setUsage] = useState<UsageRow[] | null>(null);
  const [invoices, setInvoices] = useState<{ data: InvoiceSummary[]; upcoming: Upcoming } | null>(null);
  const [limited, setLimited] = useState<ApiKey[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const fail = (e: Error) => setError(e.message);
    api.balance().then(setBalance, fail);
    api.ledger().then((l) => setLedger(l.data), fail);
    api.usage().then((u) => setUsage(u.data), fail);
    api.invoices().then(setInvoices, fail);
    api.keys().then((k) => setLimited(k.data.filter((x) => x.spendLimit && x.state === 'active')), fail);
  }, []);
  return (
    <>
      <h1>Settings → Billing</h1>
      <ErrorText error={error} />
      {balance && (
        <dl className="facts">
          <dt>Balance</dt>
          <dd data-testid="balance">
            {balance.balance} {balance.currency}
          </dd>
          <dt>Free queries left</dt>
          <dd>{balance.freeQueriesRemaining}</dd>
          <dt>Account</dt>
          <dd>{balance.paid ? 'paid (credited at least once)' : 'unpaid: free Elastic queries apply'}</dd>
        </dl>
      )}
      {limited && limited.length > 0 && (
        <section aria-labelledby="limits-title">
          <h2 id="limits-title">Spend limits of your keys</h2>
          <p>
            A key at its limit is refused (402) until the period resets; the balance is not touched. Change
            the limits in Settings → Keys.
          </p>
          <TableScroll label="Spend limits of your keys">
            <table>
              <thead>
                <tr>
                  <th scope="col">Key</th>
                  <th scope="col">Spent this period</th>
                  <th scope="col">Limit</th>
                  <th scope="col">Resets</th>
                </tr>
              </thead>
              <tbody>
                {limited.map((k) => (
                  <tr key={k.id} data-testid={`limit-${k.name}`}>
                    <td>
                      {k.name} <code>{k.prefix}…</code>
                    </td>
                    <td className="num">{k.spendLimit!.spent}</td>
                    <td className="num">
                      {k.spendLimit!.amount} / {k.spendLimit!.period}
                    </td>
                    <td>{formatDate(k.spendLimit!.resetsAt)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableScroll>
        </section>
      )}
      <section aria-labelledby="ledger-title">
        <h2 id="ledger-title">Ledger</h2>
        {ledger && ledger.length === 0 && <p>No entries yet.</p>}
        {ledger && ledger.length > 0 && (
          <TableScroll label="Ledger">
            <table>
              <thead>
                <tr>
                  <th scope="col">When</th>
                  <th scope="col">Kind</th>
                  <th scope="col">Amount</th>
                  <th scope="col">Balance after</th>
                  <th scope="col">Reference</th>
                </tr>
              </thead>
              <tbody>
                {ledger.map((e) => (
                  <tr key={e.id}>
                    <td>{formatDate(e.createdAt)}</td>
                    <td>{e.kind}</td>
                    <td className="num">{e.amount}</td>
                    <td className="num">{e.balanceAfter}</td>
                    <td>{e.reference ?? '—'}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableScroll>
        )}
      </section>
      <section aria-labelledby="usage-title">
        <h2 id="usage-title">Usage per model</h2>
        {usage && usage.length === 0 && <p>No metered usage in this period.</p>}
        {usage && usage.length > 0 && (
          <TableScroll label="Usage per model">
            <table>
              <thead>
                <tr>
                  <th scope="col">Day (UTC)</th>
                  <th scope="col">Model</th>
                  <th scope="col">Requests</th>
                  <th scope="col">Free</th>
                  <th scope="col">Prompt tokens</th>
                  <th scope="col">Completion tokens</th>
                  <th scope="col">Cost</th>
                </tr>
              </thead>
              <tbody>
                {usage.map((u) => (
                  <tr key={`${u.day}-${u.model}`}>
                    <td>{u.day}</td>
                    <td>{u.model}</td>
                    <td className="num">{u.requests}</td>
                    <td className="num">{u.freeRequests}</td>
                    <td className="num">{u.promptTokens}</td>
                    <td className="num">{u.completionTokens}</td>
                    <td className="num">{u.cost}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableScroll>
        )}
      </section>
      <section aria-labelledby="invoices-title">
        <h2 id="invoices-title">Weekly invoices (dedicated GPU time)</h2>
        {invoices && (
          <>
            <p>
              This week so far ({invoices.upcoming.periodStart.slice(0, 10)} to{' '}
              {invoices.upcoming.periodEnd.slice(0, 10)}):{' '}
              <strong>
                {invoices.upcoming.total} {invoices.upcoming.currency}
              </strong>
            </p>
            {invoices.data.length === 0 ? (
              <p>No issued invoices yet.</p>
            ) : (
              <TableScroll label="Weekly invoices">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Week</th>
                      <th scope="col">Total</th>
                      <th scope="col">Issued</th>
                    </tr>
                  </thead>
                  <tbody>
                    {invoices.data.map((i) => (
                      <tr key={i.id}>
                        <td>
                          {i.periodStart.slice(0, 10)} – {i.periodEnd.slice(0, 10)}
                        </td>
                        <td className="num">
                          {i.total} {i.currency}
                        </td>
                        <td>{formatDate(i.issuedAt)}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </TableScroll>
            )}
          </>
        )}
      </section>
    </>
  );
}
