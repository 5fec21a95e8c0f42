// Local mode meters its processes as Kubernetes meters pods: GPU time from a process's start until it
// has exited, closed when the endpoint is terminated and when the API stops, and a restart starts a
// new interval — on real PostgreSQL, with engine-simulator processes and a clock the test moves.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';
import { gpuIntervals, gpuMeterRow } from '@berth/test/support/gpu-meter';

const HOUR = 3_600_000;
const T0 = Date.parse('2026-11-24T09:00:00Z');
let db: TestDatabase;
let dataDir: string;
let api: TestApi | undefined;
const clock = { now: T0 };

const start = () =>
  startTestApi(
    {
      BERTH_RUNTIME: 'local',
      BERTH_DATA_DIR: dataDir,
      BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 0',
      BILLING_GPU_SYNC_INTERVAL_MS: '200',
    },
    db,
    { now: () => new Date(clock.now) },
  );

beforeAll(async () => {
  db = await createTestDatabase('local-gpu');
  dataDir = mkdtempSync(path.join(tmpdir(), 'berth-local-gpu-'));
});
afterAll(async () => {
  await api?.stop();
  await db?.drop();
  rmSync(dataDir, { recursive: true, force: true });
});

const meter = (id: string) => gpuMeterRow(db.url, id);
const intervals = (id: string) => gpuIntervals(db.url, id);
const iso = (ms: number) => new Date(ms).toISOString();

async function create(a: TestApi, key: string) {
  const res = await fetch(`${a.url}/api/endpoints`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'org/small',
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 2 },
      scaling: { idleTimeoutSeconds: 600 },
    }),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

describe('local mode GPU metering', () => {
  it('from the process start to its exit; terminating closes the record; a stop and a restart split it', async () => {
    api = await start();
    const acct = await api.newAccount();

    const a = await create(api, acct.compute);
    await eventually(async () =>
      expect(await meter(a)).toMatchObject({ replicas: 1, opened_at: new Date(T0) }),
    );
    clock.now = T0 + HOUR;
    await eventually(async () => expect((await meter(a))!.last_observed_at).toEqual(new Date(T0 + HOUR)));
    clock.now = T0 + 1.5 * HOUR;
    const del = await fetch(`${api.url}/api/endpoints/${a}`, {
      method: 'DELETE',
      headers: bearer(acct.compute),
    });
    expect(del.status).toBe(200);
    await eventually(async () => expect((await meter(a))!.terminated_at).toEqual(new Date(T0 + 1.5 * HOUR)));
    expect(await intervals(a)).toEqual([[1, iso(T0), iso(T0 + 1.5 * HOUR)]]);

    // An endpoint running when the API stops: its time ends with the stop, and starts again with it.
    const b = await create(api, acct.compute);
    await eventually(async () => expect(await meter(b)).toMatchObject({ replicas: 1 }));
    const opened = T0 + 1.5 * HOUR; // created at that time of the clock
    expect((await meter(b))!.opened_at).toEqual(new Date(opened));
    clock.now = T0 + 3 * HOUR;
    await api.stop();
    api = undefined;
    expect(await meter(b)).toMatchObject({ replicas: 0, opened_at: null, terminated_at: null });
    expect(await intervals(b)).toEqual([[1, iso(opened), iso(T0 + 3 * HOUR)]]);

    clock.now = T0 + 5 * HOUR;
    api = await start();
    await eventually(
      async () => expect(await meter(b)).toMatchObject({ replicas: 1, opened_at: new Date(T0 + 5 * HOUR) }),
      {
        timeout: 20_000,
      },
    );
    // The running week's upcoming invoice, an hour after the restart.
    clock.now = T0 + 6 * HOUR;
    const invoices = (await (
      await fetch(`${api.url}/api/billing/invoices`, { headers: bearer(acct.global) })
    ).json()) as {
      upcoming: { lines: { endpointId: string; gpuHours: string }[] };
    };
    expect(invoices.upcoming.lines.map((l) => [l.endpointId, l.gpuHours])).toEqual(
      [
        [a, '3.000000'], // 2 GPUs × 1.5 h
        [b, '5.000000'], // 2 GPUs × (1.5 h before the stop + 1 h since the restart)
      ].sort((x, y) => x[0]!.localeCompare(y[0]!)),
    );
  }, 90_000);
});
