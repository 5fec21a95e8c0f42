// Per-account quotas on dedicated endpoints and their GPUs, and GET /api/endpoints a page at a time:
// through the API in local mode (real PostgreSQL, real engine-simulator processes).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { sql } from '@berth/test/support/postgres';

const ENDPOINT_QUOTA = 5;
const GPU_QUOTA = 8;

let api: TestApi;
let dataDir: string;

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), 'berth-quotas-'));
  api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: dataDir,
    BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 0',
    BERTH_LOCAL_STOP_GRACE_MS: '2000',
    BERTH_QUOTA_ENDPOINTS: String(ENDPOINT_QUOTA),
    BERTH_QUOTA_GPUS: String(GPU_QUOTA),
  });
}, 60_000);

afterAll(async () => {
  await api?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

const send = (method: string, pathname: string, key: string, body?: unknown) =>
  fetch(api.url + pathname, {
    method,
    headers: { ...bearer(key), 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
const endpoint = (gpuCount = 1, maxReplicas = 1) => ({
  model: 'org/small',
  hardware: { gpuType: 'nvidia-l4-24gb', gpuCount },
  scaling: { maxReplicas, idleTimeoutSeconds: 60 },
});
const rowsOf = async (accountId: string) =>
  (
    await sql<{ id: string }>(
      api.db.url,
      "SELECT id FROM local_endpoints WHERE spec->>'account' = $1 AND deletion_timestamp IS NULL",
      [accountId],
    )
  ).map((r) => r.id);

const endpointsMessage = (usage: number) =>
  `Quota exceeded: dedicated endpoints: this account has ${usage} and the request would make it ${usage + 1}, above the limit of ${ENDPOINT_QUOTA}. To stay within it, terminate endpoints you no longer use (DELETE /api/endpoints/{id}); to raise it, ask the platform's operator (BERTH_QUOTA_ENDPOINTS for every account, PATCH /admin/accounts/{id}/quotas for one).`;
const gpusMessage = (usage: number, wouldBe: number) =>
  `Quota exceeded: GPUs (scaling.maxReplicas × hardware.gpuCount, summed over your endpoints): this account has ${usage} and the request would make it ${wouldBe}, above the limit of ${GPU_QUOTA}. To stay within it, lower scaling.maxReplicas or hardware.gpuCount of an endpoint, or terminate one; to raise it, ask the platform's operator (BERTH_QUOTA_GPUS for every account, PATCH /admin/accounts/{id}/quotas for one).`;

describe('endpoint quota (BERTH_QUOTA_ENDPOINTS)', () => {
  it('20 simultaneous creations (POST and PUT) for a quota of 5 create exactly 5; the others are 403 and leave nothing', async () => {
    const acct = await api.newAccount();
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 2
          ? send('POST', '/api/endpoints', acct.compute, endpoint())
          : send('PUT', `/api/endpoints/endpt-race-${i}`, acct.compute, endpoint())
        ).then(async (r) => ({ status: r.status, body: await r.json() })),
      ),
    );
    expect(answers.filter((a) => a.status === 201)).toHaveLength(5);
    const refused = answers.filter((a) => a.status !== 201);
    expect(refused).toHaveLength(15);
    for (const r of refused)
      expect(r).toEqual({ status: 403, body: { error: endpointsMessage(5), code: 'quota_exceeded' } });
    expect((await rowsOf(acct.id)).sort()).toEqual(
      answers
        .filter((a) => a.status === 201)
        .map((a) => a.body.id)
        .sort(),
    );
    const listed = await (await send('GET', '/api/endpoints', acct.compute)).json();
    expect(listed.data).toHaveLength(5);
    expect(await (await send('GET', '/api/quotas', acct.compute)).json()).toEqual({
      object: 'quotas',
      keys: { limit: 100, usage: 3 },
      endpoints: { limit: ENDPOINT_QUOTA, usage: 5 },
      gpus: { limit: GPU_QUOTA, usage: 5 },
      chronos_runs: { limit: 100, usage: 0 },
    });

    // A PUT of an endpoint that exists is no creation: still allowed at the quota.
    const existing = answers.find((a) => a.status === 201)!.body.id as string;
    const again = await send('PUT', `/api/endpoints/${existing}`, acct.compute, endpoint());
    expect(again.status).toBe(200);

    // A terminated endpoint frees its place at once (one being terminated does not count).
    expect((await send('DELETE', `/api/endpoints/${existing}`, acct.compute)).status).toBe(200);
    const replacement = await send('POST', '/api/endpoints', acct.compute, endpoint());
    expect(replacement.status).toBe(201);
    const over = await send('POST', '/api/endpoints', acct.compute, endpoint());
    expect(over.status).toBe(403);
    expect(await over.json()).toEqual({ error: endpointsMessage(5), code: 'quota_exceeded' });

    // Another account is not limited by this one's.
    const other = await api.newAccount();
    const theirs = await send('POST', '/api/endpoints', other.compute, endpoint());
    expect(theirs.status).toBe(201);
  }, 60_000);
});

describe('GPU quota (BERTH_QUOTA_GPUS: Σ maxReplicas × gpuCount)', () => {
  it('refuses a create, PUT or PATCH that raises the sum past it (nothing changes); lowering is always allowed', async () => {
    const acct = await api.newAccount();
    // 2 GPUs × 3 replicas = 6 of 8.
    const first = await send('PUT', '/api/endpoints/endpt-gpus-a', acct.compute, endpoint(2, 3));
    expect(first.status).toBe(201);

    // A new endpoint of 4 would make it 10.
    const big = await send('POST', '/api/endpoints', acct.compute, endpoint(4, 1));
    expect(big.status).toBe(403);
    expect(await big.json()).toEqual({ error: gpusMessage(6, 10), code: 'quota_exceeded' });
    const bigPut = await send('PUT', '/api/endpoints/endpt-gpus-b', acct.compute, endpoint(1, 3));
    expect(bigPut.status).toBe(403);
    expect(await bigPut.json()).toEqual({ error: gpusMessage(6, 9), code: 'quota_exceeded' });
    expect((await send('GET', '/api/endpoints/endpt-gpus-b', acct.compute)).status).toBe(404);
    expect(await rowsOf(acct.id)).toEqual(['endpt-gpus-a']);

    // PATCH to 4 replicas: 8, allowed; to 5: 10, refused and the endpoint keeps its generation.
    const to8 = await send('PATCH', '/api/endpoints/endpt-gpus-a', acct.compute, {
      scaling: { maxReplicas: 4 },
    });
    expect(to8.status).toBe(200);
    expect(await to8.json()).toMatchObject({ scaling: { maxReplicas: 4 }, generation: 2 });
    const to10 = await send('PATCH', '/api/endpoints/endpt-gpus-a', acct.compute, {
      scaling: { maxReplicas: 5 },
    });
    expect(to10.status).toBe(403);
    expect(await to10.json()).toEqual({ error: gpusMessage(8, 10), code: 'quota_exceeded' });
    const gpus4 = await send('PATCH', '/api/endpoints/endpt-gpus-a', acct.compute, {
      hardware: { gpuCount: 4 },
    });
    expect(gpus4.status).toBe(403);
    expect(await gpus4.json()).toEqual({ error: gpusMessage(8, 16), code: 'quota_exceeded' });
    // The same through PUT (update in place).
    const put10 = await send('PUT', '/api/endpoints/endpt-gpus-a', acct.compute, endpoint(2, 5));
    expect(put10.status).toBe(403);
    const after = await (await send('GET', '/api/endpoints/endpt-gpus-a', acct.compute)).json();
    expect(after).toMatchObject({ scaling: { maxReplicas: 4 }, hardware: { gpuCount: 2 }, generation: 2 });

    // The platform operator raises this account's GPU quota: the same PATCH now passes.
    const raised = await api.admin(`/admin/accounts/${acct.id}/quotas`, {
      method: 'PATCH',
      body: JSON.stringify({ gpus: 10 }),
    });
    expect(raised.status).toBe(200);
    const to10ok = await send('PATCH', '/api/endpoints/endpt-gpus-a', acct.compute, {
      scaling: { maxReplicas: 5 },
    });
    expect(to10ok.status).toBe(200);
    await api.admin(`/admin/accounts/${acct.id}/quotas`, {
      method: 'PATCH',
      body: JSON.stringify({ gpus: null }),
    });

    // Lowering: allowed (even above the quota), and it makes room.
    const down = await send('PATCH', '/api/endpoints/endpt-gpus-a', acct.compute, {
      scaling: { maxReplicas: 1 },
    });
    expect(down.status).toBe(200);
    expect((await send('POST', '/api/endpoints', acct.compute, endpoint(2, 3))).status).toBe(201);
  }, 60_000);
});

describe('GET /api/endpoints pages (limit, after)', () => {
  it('pages through every endpoint once, oldest first; bad limit or after is 400 naming the field', async () => {
    const acct = await api.newAccount();
    for (let i = 0; i < 5; i++)
      expect((await send('PUT', `/api/endpoints/endpt-page-${i}`, acct.compute, endpoint())).status).toBe(
        201,
      );
    const all = await (await send('GET', '/api/endpoints', acct.compute)).json();
    const ids = all.data.map((e: { id: string }) => e.id);
    expect(ids).toEqual(['endpt-page-0', 'endpt-page-1', 'endpt-page-2', 'endpt-page-3', 'endpt-page-4']);
    expect(all).toMatchObject({ object: 'list', has_more: false, first_id: ids[0], last_id: ids[4] });

    const seen: string[] = [];
    let after = '';
    for (let pages = 1; ; pages++) {
      const page = await (
        await send('GET', `/api/endpoints?limit=2${after ? `&after=${after}` : ''}`, acct.compute)
      ).json();
      seen.push(...page.data.map((e: { id: string }) => e.id));
      if (!page.has_more) {
        expect(pages).toBe(3);
        break;
      }
      after = page.last_id;
    }
    expect(seen).toEqual(ids);

    const other = await api.newAccount();
    for (const [query, message] of [
      ['?limit=0', 'Invalid query: limit: must be between 1 and 100'],
      ['?limit=x', 'Invalid query: limit: must be a number'],
      [
        '?after=endpt-nope',
        'Invalid query: after: no endpoint endpt-nope in this account (deleted since? list again without after)',
      ],
      ['?page=2', 'Invalid query: Unrecognized key: "page"'],
    ] as const) {
      const r = await send('GET', `/api/endpoints${query}`, acct.compute);
      expect({ query, status: r.status, body: await r.json() }).toEqual({
        query,
        status: 400,
        body: { error: message, code: 'validation_error' },
      });
    }
    // Another account's endpoint is no cursor.
    const theirs = await send('GET', `/api/endpoints?after=endpt-page-0`, other.compute);
    expect(theirs.status).toBe(400);
  }, 60_000);
});
