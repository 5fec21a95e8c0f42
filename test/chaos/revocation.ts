// Revocation on replica A cuts a stream on replica B: two API processes on one database, an Elastic
// model backed by an engine simulator that streams for a minute. Each try creates a key, opens a
// stream with it on B, waits for the first content, revokes the key through A, and measures how long
// until B's stream ends (from the start of DELETE). CHAOS_TRIES tries (default 50); the guarantee is
// every stream ended within 1 s, with the spec's 401 `Invalid API key` error frame.
import { randomUUID } from 'node:crypto';
import { startEngineSim } from '@berth/engine-sim';
import { bearer, spawnApi } from '../support/api.ts';
import { eventually } from '../support/eventually.ts';
import { createTestDatabase } from '../support/postgres.ts';
import { knob, quantiles, report, Tally } from './lib.ts';

const ADMIN = 'chaos-revocation-admin-token';

export async function revocationAcrossReplicas(): Promise<{ text: string; passed: boolean }> {
  const startedAt = Date.now();
  const tries = knob('TRIES', 50);
  const db = await createTestDatabase('chaos_rev');
  const engine = await startEngineSim({ model: 'org/long', ttftMs: 0, itlMs: 10, outputTokens: 4000 });
  const env = { DATABASE_URL: db.url, ADMIN_TOKEN: ADMIN, REVOCATION_ACK_TIMEOUT_MS: '2000' };
  const [a, b] = await Promise.all([spawnApi(env), spawnApi(env)]);
  const admin = (api: { url: string }, p: string, init: RequestInit = {}) =>
    fetch(api.url + p, {
      ...init,
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json', ...init.headers },
    });
  try {
    const put = await admin(a, '/admin/models/long', {
      method: 'PUT',
      body: JSON.stringify({
        kind: 'chat',
        backends: [{ baseUrl: engine.url + '/v1', model: 'org/long' }],
        pricing: { inputPerMTok: '0.01', outputPerMTok: '0.01' },
      }),
    });
    if (put.status !== 201) throw new Error(`model: ${put.status} ${await put.text()}`);
    const { account, key: first } = (await (
      await admin(a, '/admin/accounts', { method: 'POST', body: '{}' })
    ).json()) as { account: { id: string }; key: { value: string } };
    await admin(a, `/admin/accounts/${account.id}/credits`, {
      method: 'POST',
      body: JSON.stringify({ amount: '100.00' }),
      headers: { 'idempotency-key': randomUUID() },
    });
    const global = (await (
      await admin(a, `/admin/accounts/${account.id}/keys`, {
        method: 'POST',
        body: JSON.stringify({ name: 'admin', scope: 'global' }),
      })
    ).json()) as { value: string };
    // B serves the model A added.
    await eventually(
      async () =>
        (
          (await (await fetch(`${b.url}/api/models`, { headers: bearer(first.value) })).json()) as {
            data: { id: string }[];
          }
        ).data.some((m) => m.id === 'long'),
      { timeout: 30_000, description: 'replica B serves the model' },
    );

    const cutMs: number[] = [];
    const deleteMs: number[] = [];
    const endings = new Tally();
    for (let i = 0; i < tries; i++) {
      const key = (await (
        await fetch(`${a.url}/api/keys`, {
          method: 'POST',
          headers: { ...bearer(global.value), 'content-type': 'application/json' },
          body: JSON.stringify({ name: `try-${i}`, scope: 'inference' }),
        })
      ).json()) as { id: string; value: string };
      const res = await fetch(`${b.url}/api/chat/completions`, {
        method: 'POST',
        headers: { ...bearer(key.value), 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'long',
          stream: true,
          max_tokens: 4000,
          messages: [{ role: 'user', content: 'go' }],
        }),
      });
      if (res.status !== 200 || !res.body) {
        endings.add(`stream not started: ${res.status} ${(await res.text()).slice(0, 200)}`);
        continue;
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let text = '';
      while (!text.includes('"content"')) {
        const { value, done } = await reader.read();
        if (done) break;
        text += value;
      }
      const t0 = performance.now();
      const ended = (async () => {
        let tail = '';
        for (;;) {
          const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }));
          if (value) tail += value;
          if (done) return tail;
        }
      })();
      const del = await fetch(`${a.url}/api/keys/${key.id}`, {
        method: 'DELETE',
        headers: bearer(global.value),
      });
      deleteMs.push(performance.now() - t0);
      if (del.status !== 200) endings.add(`DELETE ${del.status}`);
      const timeout = new Promise<undefined>((r) => setTimeout(() => r(undefined), 5_000).unref());
      const tail = await Promise.race([ended, timeout]);
      if (tail === undefined) {
        endings.add('still streaming after 5 s');
        await reader.cancel();
        continue;
      }
      cutMs.push(performance.now() - t0);
      endings.add(
        tail.includes('"Invalid API key"') && tail.trimEnd().endsWith('data: [DONE]')
          ? '401 Invalid API key frame + [DONE]'
          : tail.includes('"Invalid API key"')
            ? '401 Invalid API key frame'
            : 'ended without the error frame',
      );
    }
    const over1s = cutMs.filter((x) => x > 1000).length;
    const passed = cutMs.length === tries && over1s === 0;
    const text = report(
      {
        suite: 'Revocation on replica A cuts a stream on replica B',
        setup: `Two API processes on one PostgreSQL database; an Elastic model on an engine simulator streaming 4,000 tokens at 10 ms each. ${tries} tries: new key, stream opened on B, first content read, key revoked through A (DELETE /api/keys/{id}); time measured from the start of DELETE to the end of B's stream.`,
        rows: [
          ['tries', tries],
          ['streams cut within 1 s', `${cutMs.length - over1s} of ${tries}`],
          ['time to cut on B (from DELETE on A)', quantiles(cutMs)],
          ['DELETE on A (waits for every replica to acknowledge)', quantiles(deleteMs)],
          ['how streams ended', endings.toString()],
        ],
        passed,
      },
      startedAt,
    );
    return { text, passed };
  } finally {
    await Promise.all([a.stop(), b.stop()]);
    await engine.close();
    await db.drop();
  }
}
