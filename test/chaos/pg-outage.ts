// PostgreSQL unreachable for CHAOS_OUTAGE_MS (default 30 s) under a running API in local mode, through
// a TCP proxy the suite cuts (the shared server is not touched). Clients keep calling a dedicated
// endpoint with a key verified before the outage, a writer keeps creating keys, a prober polls
// /readyz. Guarantees: readiness goes unready and comes back; warm-key calls keep working; writes
// answer 503 `Service temporarily unavailable` (never 500) and store nothing; after the outage every
// answered call's usage is in endpoint_usage and every 201 key is in api_keys.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { bearer, startTestApi } from '../support/api.ts';
import { eventually } from '../support/eventually.ts';
import { createTestDatabase, sql } from '../support/postgres.ts';
import { tcpProxy, throughProxy } from '../support/tcp-proxy.ts';
import { knob, quantiles, report, sleep, Tally } from './lib.ts';

type Phase = 'before' | 'outage' | 'after';
const PHASES: Phase[] = ['before', 'outage', 'after'];

export async function pgOutage(): Promise<{ text: string; passed: boolean }> {
  const startedAt = Date.now();
  const outageMs = knob('OUTAGE_MS', 30_000);
  const steadyMs = knob('STEADY_MS', 8_000);
  const clients = knob('CLIENTS', 4);
  const db = await createTestDatabase('chaos_pg');
  const u = new URL(db.url);
  const proxy = await tcpProxy({ host: u.hostname, port: Number(u.port) });
  const dataDir = mkdtempSync(path.join(tmpdir(), 'berth-chaos-pg-'));
  const api = await startTestApi(
    {
      BERTH_RUNTIME: 'local',
      BERTH_DATA_DIR: dataDir,
      BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 0',
      USAGE_FLUSH_INTERVAL_MS: '1000',
    },
    { ...db, url: throughProxy(db.url, proxy) },
  );
  try {
    const acct = await api.newAccount();
    const created = await fetch(`${api.url}/api/endpoints`, {
      method: 'POST',
      headers: { ...bearer(acct.compute), 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'org/chaos',
        hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
        scaling: { idleTimeoutSeconds: 3600 },
      }),
    });
    const { id } = (await created.json()) as { id: string };
    await eventually(
      async () =>
        (
          (await (
            await fetch(`${api.url}/api/endpoints/${id}`, { headers: bearer(acct.compute) })
          ).json()) as {
            status: string;
          }
        ).status === 'up',
      { timeout: 60_000, description: 'endpoint up' },
    );

    let phase: Phase = 'before';
    let running = true;
    const calls = Object.fromEntries(PHASES.map((p) => [p, new Tally()])) as Record<Phase, Tally>;
    const writes = Object.fromEntries(PHASES.map((p) => [p, new Tally()])) as Record<Phase, Tally>;
    const latencies: Record<Phase, number[]> = { before: [], outage: [], after: [] };
    let answered = 0;
    let keysCreated = 0;

    const call = async () => {
      const at = phase;
      const t0 = performance.now();
      try {
        const res = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
          method: 'POST',
          headers: { ...bearer(acct.inference), 'content-type': 'application/json' },
          body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }),
        });
        await res.arrayBuffer();
        calls[at].add(res.status);
        if (res.status === 200) answered++;
      } catch (err) {
        calls[at].add(`error:${(err as Error).message}`);
      }
      latencies[at].push(performance.now() - t0);
    };
    const client = async () => {
      while (running) {
        await call();
        await sleep(20);
      }
    };
    const writer = async () => {
      while (running) {
        const at = phase;
        try {
          const res = await fetch(`${api.url}/api/keys`, {
            method: 'POST',
            headers: { ...bearer(acct.global), 'content-type': 'application/json' },
            body: JSON.stringify({ name: 'chaos', scope: 'inference' }),
          });
          const body = await res.text();
          writes[at].add(res.status);
          if (res.status === 201) keysCreated++;
          if (res.status === 503 && !body.includes('Service temporarily unavailable'))
            writes[at].add('503 with another message');
        } catch (err) {
          writes[at].add(`error:${(err as Error).message}`);
        }
        await sleep(250);
      }
    };
    let cutAt = 0;
    let restoredAt = 0;
    let unreadyAfterMs: number | undefined;
    let readyAfterMs: number | undefined;
    const readyReasons = new Tally();
    const prober = async () => {
      while (running) {
        const res = await fetch(`${api.url}/readyz`).catch(() => undefined);
        const body = res ? ((await res.json()) as { checks: { database: string } }) : undefined;
        if (phase === 'outage' && res?.status === 503) {
          unreadyAfterMs ??= Date.now() - cutAt;
          readyReasons.add(JSON.stringify(body?.checks.database));
        }
        if (phase === 'after' && res?.status === 200) readyAfterMs ??= Date.now() - restoredAt;
        await sleep(100);
      }
    };

    await call(); // the key is verified (and cached) before the outage
    const loops = [...Array.from({ length: clients }, client), writer(), prober()];
    await sleep(steadyMs);
    phase = 'outage';
    cutAt = Date.now();
    proxy.cut();
    await sleep(outageMs);
    proxy.restore();
    restoredAt = Date.now();
    phase = 'after';
    await sleep(steadyMs);
    running = false;
    await Promise.all(loops);

    // Nothing lost: every answered call's usage and every created key is stored once it is back.
    let stored = -1;
    await eventually(
      async () => {
        const [row] = await sql<{ n: string | null }>(
          db.url,
          'SELECT sum(requests)::text AS n FROM endpoint_usage',
        );
        stored = Number(row?.n ?? 0);
        return stored === answered;
      },
      { timeout: 20_000 },
    ).catch(() => {});
    const [keys] = await sql<{ n: string }>(
      db.url,
      `SELECT count(*)::text AS n FROM api_keys WHERE name = 'chaos'`,
    );

    const fives = (t: Tally) => [...t.counts.keys()].filter((k) => k === '500').length;
    const notOk = (t: Tally) => t.total - t.get(200);
    const passed =
      notOk(calls.before) === 0 &&
      notOk(calls.outage) === 0 &&
      notOk(calls.after) === 0 &&
      PHASES.every((p) => fives(writes[p]) === 0) &&
      writes.outage.total === writes.outage.get(503) &&
      unreadyAfterMs !== undefined &&
      readyAfterMs !== undefined &&
      stored === answered &&
      Number(keys?.n) === keysCreated;
    const text = report(
      {
        suite: 'PostgreSQL unreachable',
        setup: `Local mode (engine simulator), PostgreSQL behind a TCP proxy cut for ${outageMs / 1000} s between ${steadyMs / 1000} s of steady traffic before and after; ${clients} clients calling a dedicated endpoint back to back with a key verified before the outage, one writer creating a key every 250 ms, /readyz polled every 100 ms.`,
        rows: [
          ['dedicated calls before / during / after', PHASES.map((p) => calls[p].total).join(' / ')],
          ['dedicated call outcomes during the outage', calls.outage.toString()],
          ['dedicated call outcomes before + after', `${calls.before} + ${calls.after}`],
          ['dedicated call latency during the outage', quantiles(latencies.outage)],
          ['dedicated call latency before', quantiles(latencies.before)],
          ['key writes during the outage', writes.outage.toString()],
          ['key writes before / after', `${writes.before} / ${writes.after}`],
          ['/readyz unready after the cut', unreadyAfterMs === undefined ? 'never' : `${unreadyAfterMs} ms`],
          ['/readyz reasons seen', readyReasons.toString()],
          ['/readyz ready again after restore', readyAfterMs === undefined ? 'never' : `${readyAfterMs} ms`],
          [
            'answered calls / requests in endpoint_usage (lost)',
            `${answered} / ${stored} (${answered - stored})`,
          ],
          ['keys answered 201 / stored', `${keysCreated} / ${keys?.n}`],
        ],
        passed,
      },
      startedAt,
    );
    return { text, passed };
  } finally {
    await api.close();
    await proxy.close();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
