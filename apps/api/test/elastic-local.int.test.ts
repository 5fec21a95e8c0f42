// Elastic inference in local mode: a catalog entry whose backend is a dedicated endpoint of a
// platform account, run as an engine-simulator process by local mode's runtime, called by another
// account with the official OpenAI SDK at `<berth>/api` — chat (stream and not), the usage rows
// equal to what the engine reported, and the pool, once hibernated, woken by an Elastic call.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';
import { sql } from '@berth/test/support/postgres';

let dataDir: string;
let api: TestApi;
let platform: Awaited<ReturnType<TestApi['newAccount']>>;
let user: Awaited<ReturnType<TestApi['newAccount']>>;
let pool: string;
let client: OpenAI;
const pricing = { inputPerMTok: '1.00', outputPerMTok: '2.00' };

const phase = async (id: string) =>
  (
    (await (await fetch(`${api.url}/api/endpoints/${id}`, { headers: bearer(platform.compute) })).json()) as {
      status: string;
    }
  ).status;

async function usage() {
  const rows = await sql<{ requests: number; prompt: number; completion: number; cost: string }>(
    api.db.url,
    'SELECT sum(requests)::int AS requests, sum(prompt_tokens)::int AS prompt, sum(completion_tokens)::int AS completion, sum(cost)::text AS cost FROM metered_usage WHERE account_id = $1 AND model = $2',
    [user.id, 'pool'],
  );
  return rows[0] ?? { requests: 0, prompt: 0, completion: 0, cost: '0' };
}

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), 'berth-elastic-local-'));
  api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: dataDir,
    BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 1 --output-tokens 12 --startup-delay-ms 300',
    BILLING_FLUSH_INTERVAL_MS: '200',
  });
  platform = await api.newAccount();
  user = await api.newAccount();
  // An id of the platform's choosing (PUT): the catalog takes every id the endpoint API does.
  const created = await fetch(`${api.url}/api/endpoints/endpt-plat-pool`, {
    method: 'PUT',
    headers: { ...bearer(platform.compute), 'content-type': 'application/json' },
    body: JSON.stringify({
      name: 'pool',
      model: 'org/pool',
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
    }),
  });
  expect(created.status).toBe(201);
  pool = ((await created.json()) as { id: string }).id;
  expect(pool).toBe('endpt-plat-pool');
  await eventually(async () => (await phase(pool)) === 'up', { timeout: 60_000, description: 'pool up' });
  const put = await api.admin('/admin/models/pool', {
    method: 'PUT',
    body: JSON.stringify({ kind: 'chat', backends: [{ endpoint: pool }], pricing }),
  });
  expect(put.status, await put.clone().text()).toBe(201);
  const credit = await api.admin(`/admin/accounts/${user.id}/credits`, {
    method: 'POST',
    body: JSON.stringify({ amount: '10.00' }),
    headers: { 'idempotency-key': randomUUID() },
  });
  expect(credit.status).toBe(201);
  client = new OpenAI({ baseURL: `${api.url}/api`, apiKey: user.inference, maxRetries: 0 });
}, 120_000);

afterAll(async () => {
  await api?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('Elastic in local mode, served by a platform endpoint', () => {
  const reported = { requests: 0, prompt: 0, completion: 0 };

  it('answers chat, streamed and not, by display name', async () => {
    const r = await client.chat.completions.create({
      model: 'pool',
      messages: [{ role: 'user', content: 'Hello there' }],
    });
    expect(r.model).toBe('pool'); // the catalog model that answered, never the backend's own name
    expect(r.usage!.completion_tokens).toBe(12);
    reported.requests++;
    reported.prompt += r.usage!.prompt_tokens;
    reported.completion += r.usage!.completion_tokens;

    const stream = await client.chat.completions.create({
      model: 'pool',
      messages: [{ role: 'user', content: 'Stream it' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    for await (const chunk of stream) {
      expect(chunk.model).toBe('pool');
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) {
        reported.requests++;
        reported.prompt += chunk.usage.prompt_tokens;
        reported.completion += chunk.usage.completion_tokens;
      }
    }
    expect(text.length).toBeGreaterThan(0);
    expect(reported.requests).toBe(2);
  });

  it('meters exactly what the engine reported, at the catalog price', async () => {
    const u = await eventually(
      async () => {
        const now = await usage();
        return now.requests === reported.requests ? now : false;
      },
      { timeout: 10_000, description: 'usage flushed' },
    );
    expect({ prompt: u.prompt, completion: u.completion }).toEqual({
      prompt: reported.prompt,
      completion: reported.completion,
    });
    // $1 per million prompt tokens, $2 per million completion tokens: stored in micro-dollars.
    expect(Number(u.cost)).toBe(reported.prompt * 1 + reported.completion * 2);
  });

  it('wakes the hibernated pool for an Elastic call, once', async () => {
    await eventually(async () => (await phase(pool)) === 'hibernated', {
      timeout: 60_000,
      interval: 500,
      description: 'pool hibernated',
    });
    const answers = await Promise.all(
      [1, 2, 3].map((i) =>
        client.chat.completions.create({ model: 'pool', messages: [{ role: 'user', content: `wake ${i}` }] }),
      ),
    );
    expect(answers.map((a) => a.usage!.completion_tokens)).toEqual([12, 12, 12]);
    expect(await phase(pool)).toBe('up');
    const logs = await (
      await fetch(`${api.url}/api/endpoints/${pool}/logs`, { headers: bearer(platform.compute) })
    ).text();
    expect(logs.match(/WakeRequested/g)).toHaveLength(1);
  });
});
