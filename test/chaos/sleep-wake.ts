// Sleep/wake cycles of one endpoint in local mode (engine simulator processes), with traffic at
// random times: after the endpoint hibernates (idle timeout 15 s, the minimum), a random pause, then
// 1–6 requests at random moments over 3 s — the first wakes it, the others arrive while it wakes or
// is up. Guarantees: no request lost or failed, exactly one wake per sleep (the endpoint's own
// events, and the API's wake metric). CHAOS_CYCLES cycles (default 8; 100 takes about 35 minutes).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { bearer, startTestApi } from '../support/api.ts';
import { eventually } from '../support/eventually.ts';
import { knob, quantiles, report, sleep, Tally } from './lib.ts';

export async function sleepWake(): Promise<{ text: string; passed: boolean }> {
  const startedAt = Date.now();
  const cycles = knob('CYCLES', 8);
  const dataDir = mkdtempSync(path.join(tmpdir(), 'berth-chaos-wake-'));
  const api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: dataDir,
    BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 1 --startup-delay-ms 300',
  });
  try {
    const acct = await api.newAccount();
    const created = await fetch(`${api.url}/api/endpoints`, {
      method: 'POST',
      headers: { ...bearer(acct.compute), 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'org/sleepy',
        hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
        scaling: { idleTimeoutSeconds: 15 },
      }),
    });
    const { id } = (await created.json()) as { id: string };
    const phase = async () =>
      (
        (await (await fetch(`${api.url}/api/endpoints/${id}`, { headers: bearer(acct.compute) })).json()) as {
          status: string;
        }
      ).status;
    await eventually(async () => (await phase()) === 'up', { timeout: 60_000, description: 'endpoint up' });
    // The official SDK, as users call it: a lost request would surface as an error here.
    const client = new OpenAI({ baseURL: `${api.url}/api/d/${id}`, apiKey: acct.inference, maxRetries: 0 });

    const outcomes = new Tally();
    const heldMs: number[] = [];
    const sleepMs: number[] = [];
    let requests = 0;
    let sleeps = 0;
    for (let c = 0; c < cycles; c++) {
      const idleFrom = Date.now();
      await eventually(async () => (await phase()) === 'hibernated', {
        timeout: 120_000,
        interval: 200,
        description: `cycle ${c}: hibernated`,
      });
      sleeps++;
      sleepMs.push(Date.now() - idleFrom);
      await sleep(Math.random() * 2_000);
      const n = 1 + Math.floor(Math.random() * 6);
      requests += n;
      await Promise.all(
        Array.from({ length: n }, async (_, i) => {
          await sleep(i === 0 ? 0 : Math.random() * 3_000);
          const t0 = performance.now();
          try {
            const stream = Math.random() < 0.5;
            if (stream) {
              const s = await client.chat.completions.create({
                model: id,
                messages: [{ role: 'user', content: `cycle ${c} request ${i}` }],
                max_tokens: 8,
                stream: true,
              });
              let chunks = 0;
              for await (const _chunk of s) chunks++;
              outcomes.add(chunks > 0 ? 'ok (stream)' : 'empty stream');
            } else {
              const r = await client.chat.completions.create({
                model: id,
                messages: [{ role: 'user', content: `cycle ${c} request ${i}` }],
                max_tokens: 8,
              });
              outcomes.add(r.choices[0]?.message.content ? 'ok' : 'empty answer');
            }
          } catch (err) {
            outcomes.add(`failed: ${(err as Error).message.slice(0, 80)}`);
          }
          if (i === 0) heldMs.push(performance.now() - t0);
        }),
      );
    }
    const logs = await (
      await fetch(`${api.url}/api/endpoints/${id}/logs`, { headers: bearer(acct.compute) })
    ).text();
    const wakeEvents = (logs.match(/event Normal WakeRequested/g) ?? []).length;
    const sleepEvents = (logs.match(/event Normal IdleTimeout/g) ?? []).length;
    const metrics = await (await fetch(`${api.url}/metrics`)).text();
    const woken = Number(
      new RegExp(`^berth_endpoint_wake_duration_seconds_count\\{endpoint="${id}"\\} (\\d+)`, 'm').exec(
        metrics,
      )?.[1] ?? 0,
    );
    const ok = outcomes.get('ok') + outcomes.get('ok (stream)');
    const passed = ok === requests && wakeEvents === sleeps && woken === sleeps;
    const text = report(
      {
        suite: 'Sleep/wake cycles with random traffic',
        setup: `Local mode, one endpoint (idle timeout 15 s, engine start-up 300 ms), ${cycles} cycles: wait until hibernated, pause 0–2 s, then 1–6 requests (half streaming) at random moments within 3 s, through the official openai SDK with retries off.`,
        rows: [
          ['cycles (sleeps)', sleeps],
          ['requests / answered / lost or failed', `${requests} / ${ok} / ${requests - ok}`],
          ['outcomes', outcomes.toString()],
          ['wakes: Waking events / API wake metric / sleeps', `${wakeEvents} / ${woken} / ${sleeps}`],
          ['hibernation events', sleepEvents],
          ['first request of a cycle (held through the wake)', quantiles(heldMs)],
          ['from the last request to hibernated', quantiles(sleepMs)],
        ],
        passed,
      },
      startedAt,
    );
    return { text, passed };
  } finally {
    await api.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
