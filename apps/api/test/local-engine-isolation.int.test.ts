// Local mode's engine processes (issue 21): they get an allow-listed environment, never the API's
// secrets; and engines a killed API left behind are stopped — waited for, then SIGKILLed — before
// new ones start (a vLLM engine still holding GPU memory would make the new one fail with CUDA OOM).
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';

let db: TestDatabase;
let dataDir: string;
let api: TestApi | undefined;
const saved = { ...process.env };
const leftovers: number[] = [];

beforeAll(async () => {
  db = await createTestDatabase('engine_env');
  dataDir = mkdtempSync(path.join(tmpdir(), 'berth-engine-env-'));
});

afterAll(async () => {
  await api?.stop();
  for (const pid of leftovers) if (alive(pid)) process.kill(pid, 'SIGKILL');
  process.env = saved;
  await db?.drop();
  rmSync(dataDir, { recursive: true, force: true });
});

const environ = (pid: number) =>
  Object.fromEntries(
    readFileSync(`/proc/${pid}/environ`, 'utf8')
      .split('\0')
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
  );

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(' ')[2] !== 'Z';
  } catch {
    return false;
  }
};

describe('local engines', () => {
  it('leftover engines are waited for, then SIGKILLed', async () => {
    // An "engine" a killed API left behind that ignores SIGTERM (its own process group, like one).
    const stubborn = spawn(
      process.execPath,
      [
        '-e',
        "process.on('SIGTERM', () => {}); setInterval(() => {}, 1000)",
        '--',
        '--served-model-name',
        'x',
      ],
      { detached: true, stdio: 'ignore' },
    );
    await new Promise((r) => setTimeout(r, 300));
    leftovers.push(stubborn.pid!);
    const run = path.join(dataDir, 'run');
    mkdirSync(run, { recursive: true });
    writeFileSync(path.join(run, 'endpt-leftover0000-0.pid'), String(stubborn.pid));
    expect(alive(stubborn.pid!)).toBe(true);

    const started = Date.now();
    api = await startTestApi(
      { BERTH_RUNTIME: 'local', BERTH_DATA_DIR: dataDir, BERTH_LOCAL_STOP_GRACE_MS: '1000' },
      db,
    );
    await eventually(() => !alive(stubborn.pid!), { timeout: 5_000, description: 'leftover engine gone' });
    const ms = Date.now() - started;
    expect(ms).toBeGreaterThanOrEqual(900); // it was given the grace to stop
    expect(stubborn.signalCode).toBe('SIGKILL');
    await api.stop();
    api = undefined;
  });

  it("get an allow-listed environment: none of the API's secrets", async () => {
    Object.assign(process.env, {
      ADMIN_TOKEN: 'admin-secret-in-env',
      DATABASE_URL: 'postgresql://u:p@h/db',
      KEY_HASH_SECRET: 'hash-secret-in-env',
      BERTH_SECRETS_KEY: 'f'.repeat(64),
      REDIS_URL: 'redis://secret@h',
      HF_TOKEN: 'hf_for_the_engine',
      CUDA_VISIBLE_DEVICES: '0',
      VLLM_LOGGING_LEVEL: 'INFO',
    });
    api = await startTestApi(
      {
        BERTH_RUNTIME: 'local',
        BERTH_DATA_DIR: path.join(dataDir, 'second'),
        BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 0',
      },
      db,
    );
    const acct = await api.newAccount();
    const res = await fetch(`${api.url}/api/endpoints`, {
      method: 'POST',
      headers: { ...bearer(acct.compute), 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'Qwen/Qwen2.5-0.5B-Instruct',
        hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      }),
    });
    const { id } = (await res.json()) as { id: string };
    const pid = await eventually(
      async () => {
        const logs = await (
          await fetch(`${api!.url}/api/endpoints/${id}/logs`, { headers: bearer(acct.compute) })
        ).text();
        const m = /replica 0 starting \(pid (\d+)/.exec(logs);
        return m ? Number(m[1]) : false;
      },
      { timeout: 20_000, description: 'engine started' },
    );
    const env = environ(pid);
    for (const secret of ['ADMIN_TOKEN', 'DATABASE_URL', 'KEY_HASH_SECRET', 'BERTH_SECRETS_KEY', 'REDIS_URL'])
      expect(env[secret], secret).toBeUndefined();
    expect(JSON.stringify(env)).not.toMatch(/secret/);
    expect(env).toMatchObject({
      PATH: process.env.PATH,
      HF_TOKEN: 'hf_for_the_engine',
      CUDA_VISIBLE_DEVICES: '0',
      VLLM_LOGGING_LEVEL: 'INFO',
    });
  });
});
