// How long-lived responses end: a log follower (its key revoked, its endpoint deleted), calls to a
// terminated endpoint whose engine still drains, and a stream cut at the shutdown grace. A local-mode
// API on real PostgreSQL whose engine simulator streams slowly (100 ms a token) and drains for up to
// 5 s on SIGTERM.
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, startTestApi, type TestApi } from '@berth/test/support/api';
import { eventually } from '@berth/test/support/eventually';

let dataDir: string;
let api: TestApi | undefined;
let acct: Awaited<ReturnType<TestApi['newAccount']>>;
const MODEL = 'Qwen/Qwen2.5-0.5B-Instruct';

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), 'berth-probe-streams-'));
  api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: dataDir,
    BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 100 --output-tokens 200 --shutdown-grace-ms 5000',
    SHUTDOWN_GRACE_MS: '1500',
  });
  acct = await api.newAccount();
});

afterAll(async () => {
  await api?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });

async function upEndpoint(): Promise<string> {
  const res = await fetch(`${api!.url}/api/endpoints`, {
    method: 'POST',
    headers: json(acct.compute),
    body: JSON.stringify({ model: MODEL, hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 } }),
  });
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
    { timeout: 30_000, description: `${id} up` },
  );
  return id;
}

/** Follows a log stream; resolves with everything received once the server ends it. */
function follow(id: string, key: string): { ended: Promise<string>; received: () => string } {
  let text = '';
  const ended = new Promise<string>((resolve, reject) => {
    const u = new URL(`${api!.url}/api/endpoints/${id}/logs?follow=true`);
    http
      .get(u, { headers: bearer(key) }, (res) => {
        res.setEncoding('utf8').on('data', (d: string) => (text += d));
        res.on('end', () => resolve(text));
        res.on('error', () => resolve(text));
      })
      .on('error', reject);
  });
  return { ended, received: () => text };
}

const within = <T>(p: Promise<T>, ms: number, what: string) =>
  Promise.race([
    p,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms),
    ),
  ]);

async function newGlobalKey(): Promise<{ id: string; value: string }> {
  const res = await fetch(`${api!.url}/api/keys`, {
    method: 'POST',
    headers: json(acct.global),
    body: JSON.stringify({ name: 'follower', scope: 'global' }),
  });
  return (await res.json()) as { id: string; value: string };
}

describe('a log follower', () => {
  it('ends at once when its key is revoked', async () => {
    const id = await upEndpoint();
    const key = await newGlobalKey();
    const f = follow(id, key.value);
    await eventually(() => f.received().includes('# phase'), { timeout: 5_000 });
    const revoked = await fetch(`${api!.url}/api/keys/${key.id}`, {
      method: 'DELETE',
      headers: bearer(acct.global),
    });
    expect(revoked.status).toBe(200);
    const text = await within(f.ended, 2_000, 'follower ended after revocation');
    expect(text.trimEnd().split('\n').at(-1)).toBe('# Invalid API key');
  });

  it('ends when the endpoint is deleted', async () => {
    const id = await upEndpoint();
    const f = follow(id, acct.global);
    await eventually(() => f.received().includes('# phase'), { timeout: 5_000 });
    expect(
      (await fetch(`${api!.url}/api/endpoints/${id}`, { method: 'DELETE', headers: bearer(acct.global) }))
        .status,
    ).toBe(200);
    const text = await within(f.ended, 2_000, 'follower ended after DELETE');
    expect(text.trimEnd().split('\n').at(-1)).toBe(`# endpoint ${id} was deleted`);
  });
});

describe('a log follower opened while the endpoint builds', () => {
  it('shows each change of phase as a status line, as it happens', async () => {
    const res = await fetch(`${api!.url}/api/endpoints`, {
      method: 'POST',
      headers: json(acct.compute),
      body: JSON.stringify({ model: MODEL, hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 } }),
    });
    expect(res.status).toBe(201);
    const { id } = (await res.json()) as { id: string };
    const f = follow(id, acct.global);
    await eventually(() => f.received().includes('# phase: building'), { timeout: 5_000 });
    await eventually(() => f.received().includes('# phase: up'), {
      timeout: 30_000,
      description: 'the follower sees the endpoint go up',
    });
    // One line per change, not one per status write.
    expect(f.received().match(/^# phase: up/gm)).toHaveLength(1);
    await fetch(`${api!.url}/api/endpoints/${id}`, { method: 'DELETE', headers: bearer(acct.global) });
    await within(f.ended, 5_000, 'follower ended after DELETE');
  });
});

describe('a terminated endpoint', () => {
  it('reads terminating and refuses new requests at once, while its engine drains', async () => {
    const id = await upEndpoint();
    const client = new OpenAI({ baseURL: `${api!.url}/api/d/${id}`, apiKey: acct.inference, maxRetries: 0 });
    // A stream in flight keeps the engine draining (up to 5 s) after DELETE.
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      max_tokens: 60,
    });
    const drained = (async () => {
      for await (const _ of stream);
    })().catch(() => {});
    const del = await fetch(`${api!.url}/api/endpoints/${id}`, {
      method: 'DELETE',
      headers: bearer(acct.global),
    });
    expect(del.status).toBe(200);
    const view = (await (
      await fetch(`${api!.url}/api/endpoints/${id}`, { headers: bearer(acct.global) })
    ).json()) as {
      terminating?: boolean;
      status: string;
    };
    expect(view.terminating).toBe(true);
    const started = Date.now();
    const call = await fetch(`${api!.url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: json(acct.inference),
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
    });
    expect(call.status).toBe(404);
    expect(Date.now() - started).toBeLessThan(1_000);
    await drained;
  });
});

describe('SIGTERM', () => {
  it('ends a stream cut at the grace limit with an SSE error frame: the SDK sees an APIError', async () => {
    const id = await upEndpoint();
    const client = new OpenAI({ baseURL: `${api!.url}/api/d/${id}`, apiKey: acct.inference, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      max_tokens: 150,
    });
    let chunks = 0;
    const read = (async () => {
      for await (const _ of stream) chunks++;
    })();
    await eventually(() => chunks > 2, { timeout: 5_000 });
    const closing = api!.close();
    const err = await read.then(
      () => undefined,
      (e: unknown) => e,
    );
    await closing;
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err).not.toBeInstanceOf(OpenAI.APIConnectionError);
    expect((err as Error).message).toMatch(/shutting down/);
    await api!.stop().catch(() => {});
    api = undefined;
  });
});
