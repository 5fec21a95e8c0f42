// A local-mode API on real PostgreSQL (its engines are the simulator, answering at once), an
// account with a key of each scope, and dedicated endpoints created the way a user creates them.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { expect } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });

export interface LocalApi {
  api: TestApi;
  acct: Awaited<ReturnType<TestApi['newAccount']>>;
  /** POST /api/endpoints with a compute key (a small model on one L4 unless `body` says otherwise). */
  createEndpoint(body?: Record<string, unknown>): Promise<string>;
  stop(): Promise<void>;
}

export async function startLocalApi(env: Record<string, string> = {}): Promise<LocalApi> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'berth-local-api-'));
  const api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: dataDir,
    BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 0',
    ...env,
  });
  const acct = await api.newAccount();
  return {
    api,
    acct,
    async createEndpoint(body = {}) {
      const res = await fetch(`${api.url}/api/endpoints`, {
        method: 'POST',
        headers: json(acct.compute),
        body: JSON.stringify({
          model: 'Qwen/Qwen2.5-0.5B-Instruct',
          hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
          ...body,
        }),
      });
      expect(res.status).toBe(201);
      return ((await res.json()) as { id: string }).id;
    },
    async stop() {
      await api.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
