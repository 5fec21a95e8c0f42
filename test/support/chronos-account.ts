// An account ready to hold `runs` Chronos runs on a running API, through its admin routes: a chat
// model of the catalog on one backend, the account with 1,000.00 of credit, its Chronos runs quota
// raised to `runs` (the operator's override), Chronos enabled. Returns a global key. The catalog
// entry reaches the API's other processes by NOTIFY: this waits a second for it.
import { randomUUID } from 'node:crypto';

export async function chronosAccount(
  apiUrl: string,
  adminToken: string,
  o: { model: string; backend: { baseUrl: string; model: string }; runs: number },
): Promise<string> {
  const admin = async (path: string, method: string, body: unknown) => {
    const res = await fetch(apiUrl + path, {
      method,
      headers: {
        authorization: `Bearer ${adminToken}`,
        'content-type': 'application/json',
        'idempotency-key': randomUUID(),
      },
      body: JSON.stringify(body),
    });
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
    return res.json() as Promise<Record<string, unknown>>;
  };
  await admin(`/admin/models/${o.model}`, 'PUT', {
    kind: 'chat',
    backends: [o.backend],
    pricing: { inputPerMTok: '0.01', outputPerMTok: '0.01' },
  });
  const { account } = (await admin('/admin/accounts', 'POST', { name: 'chronos' })) as {
    account: { id: string };
  };
  const { value: key } = (await admin(`/admin/accounts/${account.id}/keys`, 'POST', {
    name: 'g',
    scope: 'global',
  })) as { value: string };
  await admin(`/admin/accounts/${account.id}/credits`, 'POST', { amount: '1000.00' });
  await admin(`/admin/accounts/${account.id}/quotas`, 'PATCH', { chronos_runs: o.runs });
  const enabled = await fetch(apiUrl + '/api/tools', {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ tool_id: 'chronos' }),
  });
  if (enabled.status !== 200) throw new Error(`enabling chronos: ${enabled.status} ${await enabled.text()}`);
  await new Promise((r) => setTimeout(r, 1000));
  return key;
}
