// The weight cache, shown with a figure (issue 18): the first start of a model on a machine downloads
// its weights into the Hugging Face cache ($HF_HOME, as vLLM does), the second start of the same
// model finds them there and only loads them. Local mode (real engine-simulator processes) on real
// PostgreSQL; the simulator's download takes 3 s, its load 0.3 s.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';

let dataDir: string;
let hfHome: string;
let api: TestApi | undefined;
let acct: Awaited<ReturnType<TestApi['newAccount']>>;
const MODEL = 'org/cached-model';

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), 'berth-weight-cache-'));
  hfHome = mkdtempSync(path.join(tmpdir(), 'berth-hf-home-'));
  // Engines get the API's HF_* variables (local mode's allow-list): this test's own cache.
  process.env.HF_HOME = hfHome;
  api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: dataDir,
    BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 0 --weights-download-ms 3000 --startup-delay-ms 300',
  });
  acct = await api.newAccount();
});

afterAll(async () => {
  await api?.stop();
  delete process.env.HF_HOME;
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(hfHome, { recursive: true, force: true });
});

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });

/** Creates an endpoint of MODEL and waits for `up`: its id and the seconds from POST to `up`. */
async function start(): Promise<{ id: string; seconds: number }> {
  const t0 = performance.now();
  const res = await fetch(`${api!.url}/api/endpoints`, {
    method: 'POST',
    headers: json(acct.compute),
    body: JSON.stringify({ model: MODEL, hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 } }),
  });
  expect(res.status).toBe(201);
  const { id } = (await res.json()) as { id: string };
  await eventually(
    async () =>
      (
        (await (
          await fetch(`${api!.url}/api/endpoints/${id}`, { headers: bearer(acct.compute) })
        ).json()) as {
          status: string;
        }
      ).status === 'up',
    { timeout: 30_000, interval: 50, description: `${id} up` },
  );
  return { id, seconds: (performance.now() - t0) / 1000 };
}

const logs = async (id: string) =>
  (await fetch(`${api!.url}/api/endpoints/${id}/logs`, { headers: bearer(acct.compute) })).text();

describe('the weight cache', () => {
  it('makes the second start of a model on this machine faster than the first, and the logs say why', async () => {
    const first = await start();
    expect(await logs(first.id)).toContain(`Downloading model weights of ${MODEL}`);
    expect(readdirSync(path.join(hfHome, 'hub'))).toEqual(['models--org--cached-model']);
    await fetch(`${api!.url}/api/endpoints/${first.id}`, { method: 'DELETE', headers: bearer(acct.compute) });

    const second = await start();
    const secondLogs = await logs(second.id);
    expect(secondLogs).toContain('Using model weights cached in');
    expect(secondLogs).not.toContain('Downloading model weights');
    expect(first.seconds).toBeGreaterThanOrEqual(3);
    // The 3 s download is gone from the second start.
    expect(second.seconds).toBeLessThan(first.seconds - 2.5);
  });
});
