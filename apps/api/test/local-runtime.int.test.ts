// Local mode through the API (real PostgreSQL here, BERTH_RUNTIME=local): a failing engine process
// ends in `failed` with the reason and its output in the logs, and endpoints survive an API restart.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';

let db: TestDatabase;
let dataDir: string;
let api: TestApi | undefined;

const env = (extra: Record<string, string> = {}) => ({
  BERTH_RUNTIME: 'local',
  BERTH_DATA_DIR: dataDir,
  BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 0',
  ...extra,
});

beforeAll(async () => {
  db = await createTestDatabase('local');
  dataDir = mkdtempSync(path.join(tmpdir(), 'berth-local-api-'));
});

afterAll(async () => {
  await api?.stop();
  await db?.drop();
  rmSync(dataDir, { recursive: true, force: true });
});

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });
const create = (a: TestApi, key: string, model: string) =>
  fetch(`${a.url}/api/endpoints`, {
    method: 'POST',
    headers: json(key),
    body: JSON.stringify({
      model,
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      scaling: { idleTimeoutSeconds: 15 },
    }),
  });
const get = async (a: TestApi, key: string, id: string) =>
  (await fetch(`${a.url}/api/endpoints/${id}`, { headers: bearer(key) })).json();

describe('local runtime', () => {
  it('an engine that runs out of GPU memory: failed/ModelTooLarge, the cause in status and logs', async () => {
    api = await startTestApi(
      env({ BERTH_LOCAL_ENGINE_ARGS: '--fail-startup oom --startup-delay-ms 100' }),
      db,
    );
    expect(api.runtime?.kind).toBe('local');
    const acct = await api.newAccount();
    const res = await create(api, acct.compute, 'org/too-big');
    expect(res.status).toBe(201);
    const { id, status } = await res.json();
    expect(status).toBe('building');

    const failed = await eventually(
      async () => {
        const e = await get(api!, acct.compute, id);
        return e.status === 'failed' ? e : false;
      },
      { timeout: 20_000, description: 'endpoint failed' },
    );
    expect(failed).toMatchObject({ label: 'FAILED', reason: 'ModelTooLarge', replicas: 0, readyReplicas: 0 });
    expect(failed.message).toMatch(/ran out of memory.*CUDA out of memory/s);

    const logs = await (
      await fetch(`${api.url}/api/endpoints/${id}/logs`, { headers: bearer(acct.compute) })
    ).text();
    expect(logs).toMatch(/^# phase: failed \(ModelTooLarge\)$/m);
    expect(logs).toMatch(/torch\.OutOfMemoryError: CUDA out of memory/);
    expect(logs).toMatch(/event Warning ModelTooLarge/);

    const call = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: json(acct.inference),
      body: JSON.stringify({ model: 'org/too-big', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(call.status).toBe(424);
    expect((await call.json()).error.message).toMatch(/has failed \(ModelTooLarge\)/);
  }, 60_000);

  it('keeps endpoints across a restart: up ones build again, failed ones stay failed; terminate stops the process', async () => {
    await api?.stop();
    api = await startTestApi(env(), db);
    const acct = await api.newAccount();
    const { id } = await (await create(api, acct.compute, 'org/small')).json();
    await eventually(async () => (await get(api!, acct.compute, id)).status === 'up', { timeout: 20_000 });
    const before = api.runtime!.endpoints.list().map((e) => e.metadata.name);
    expect(before).toContain(id);

    await api.stop();
    api = await startTestApi(env(), db);
    const afterRestart = api.runtime!.endpoints.list();
    expect(afterRestart.map((e) => e.metadata.name)).toEqual(before);
    expect(afterRestart.find((e) => e.spec.model.id === 'org/too-big')?.status?.phase).toBe('failed');
    const up = await eventually(
      async () => {
        const e = await get(api!, acct.compute, id);
        return e.status === 'up' ? e : false;
      },
      { timeout: 20_000, description: 'endpoint up again after the restart' },
    );
    expect(up.readyReplicas).toBe(1);
    const answer = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: json(acct.inference),
      body: JSON.stringify({
        model: 'org/small',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 3,
      }),
    });
    expect(answer.status).toBe(200);

    const [url] = api.runtime!.backends.addresses(id);
    const del = await fetch(`${api.url}/api/endpoints/${id}`, {
      method: 'DELETE',
      headers: bearer(acct.compute),
    });
    expect(del.status).toBe(200);
    await eventually(
      async () =>
        (await fetch(`${api!.url}/api/endpoints/${id}`, { headers: bearer(acct.compute) })).status === 404,
    );
    await expect(fetch(`${url}/health`)).rejects.toThrow();
  }, 90_000);
});
