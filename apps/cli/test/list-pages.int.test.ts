// The CLI's client reads every page of the API's paged lists (what `berth keys list`, `berth endpoints
// list` and `berth apply` call): against the real API (real PostgreSQL), an account with more keys
// than one page holds.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '@berth/test/support/api';
import { sql } from '@berth/test/support/postgres';
import { Client } from '../src/client.ts';

let api: TestApi;
beforeAll(async () => {
  api = await startTestApi();
});
afterAll(async () => api?.stop());

describe('Client.listAll', () => {
  it('returns every key of an account holding more than a page (103 keys, pages of 100), in order', async () => {
    const acct = await api.newAccount();
    // The platform operator's creations are not limited by the key quota.
    for (let batch = 0; batch < 10; batch++)
      await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          api.admin(`/admin/accounts/${acct.id}/keys`, {
            method: 'POST',
            body: JSON.stringify({ name: `k${batch * 10 + i}`, scope: 'inference' }),
          }),
        ),
      );
    const expected = (
      await sql<{ id: string }>(
        api.db.url,
        'SELECT id FROM api_keys WHERE account_id = $1 ORDER BY created_at, id',
        [acct.id],
      )
    ).map((r) => r.id);
    expect(expected).toHaveLength(103);
    const first = await (
      await fetch(`${api.url}/api/keys`, { headers: { authorization: `Bearer ${acct.global}` } })
    ).json();
    expect(first.data).toHaveLength(100);
    expect(first.has_more).toBe(true);

    const keys = await new Client(api.url, acct.global).listAll('/api/keys');
    expect(keys.map((k) => k.id)).toEqual(expected);
  });
});
