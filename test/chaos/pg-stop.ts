// PostgreSQL stopped (pg_ctl stop -m immediate: a crash, no shutdown checkpoint) for CHAOS_STOP_MS
// (default 40 s) while everything that needs it is going on at once: Elastic calls being billed
// (CHAOS_CLIENTS, 3, back to back), a Chronos run firing every minute whose fire falls inside the
// stop, a dedicated endpoint waking (its engine takes 3 s to start; the wake is asked for 1 s before
// the stop), a writer creating keys. The server is the suite's own (test/support/private-postgres.ts),
// never the machine's shared one; the API is `npm start`'s entry point in local mode. Guarantees:
// no answer is a 5xx other than 503 `Service temporarily unavailable` in the route's shape (Elastic:
// the OpenAI shape with the same text in `message`) with Retry-After; no transport error; after the
// restart the usage rows' cost equals the ledger's charges to the micro-unit, the ledger reconciles,
// every answered call is in the usage rows, every minute since the run was created has exactly one
// execution (the one due in the stop runs late, once), each succeeded and called its model once, the
// wake's call is answered (held through the wake, 503s retried) with one wake asked for, a later call
// answers; the process logs at most a few error lines for the outage, not one per call.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startEngineSim } from '@berth/engine-sim';
import { bearer, spawnApi, type ApiProcess } from '../support/api.ts';
import { eventually } from '../support/eventually.ts';
import { sql } from '../support/postgres.ts';
import { startPrivatePostgres } from '../support/private-postgres.ts';
import { knob, quantiles, report, sleep, Tally } from './lib.ts';

const ADMIN = 'chaos-pg-stop-admin-token-0123';
type Phase = 'before' | 'stopped' | 'after';
const PHASES: Phase[] = ['before', 'stopped', 'after'];
const UNAVAILABLE = 'Service temporarily unavailable';

/** Whether a 503 body is the route's shape: OpenAI routes `{error: {message, type, code}, message}`, others `{error, code}`. */
function unavailableShape(body: string, openai: boolean): boolean {
  try {
    const b = JSON.parse(body) as { error?: unknown; message?: unknown; code?: unknown };
    if (!openai) return b.error === UNAVAILABLE && b.code === 'service_unavailable';
    const e = b.error as { message?: unknown; code?: unknown } | undefined;
    return e?.message === UNAVAILABLE && b.message === UNAVAILABLE && e.code === 'service_unavailable';
  } catch {
    return false;
  }
}

export async function pgStop(): Promise<{ text: string; passed: boolean }> {
  const startedAt = Date.now();
  const stopMs = knob('STOP_MS', 40_000);
  const clients = knob('CLIENTS', 3);
  const pgServer = await startPrivatePostgres();
  const dataDir = mkdtempSync(path.join(tmpdir(), 'berth-chaos-pgstop-'));
  const engine = await startEngineSim({ model: 'org/bill', ttftMs: 2, itlMs: 1, outputTokens: 16 });
  let api: ApiProcess | undefined;
  try {
    api = await spawnApi({
      DATABASE_URL: pgServer.url,
      ADMIN_TOKEN: ADMIN,
      BERTH_RUNTIME: 'local',
      BERTH_DATA_DIR: dataDir,
      BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 1 --startup-delay-ms 3000',
      BILLING_FLUSH_INTERVAL_MS: '1000',
      USAGE_FLUSH_INTERVAL_MS: '1000',
    });
    const url = api.url;
    const admin = async (p: string, method: string, body?: unknown) => {
      const res = await fetch(url + p, {
        method,
        headers: {
          authorization: `Bearer ${ADMIN}`,
          'content-type': 'application/json',
          'idempotency-key': randomUUID(),
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${await res.text()}`);
      return (await res.json()) as Record<string, unknown>;
    };
    await admin('/admin/models/bill', 'PUT', {
      kind: 'chat',
      backends: [{ baseUrl: `${engine.url}/v1`, model: 'org/bill' }],
      pricing: { inputPerMTok: '0.01', outputPerMTok: '0.02' },
    });
    const { account } = (await admin('/admin/accounts', 'POST', { name: 'pg-stop' })) as {
      account: { id: string };
    };
    const key = async (name: string, scope: string) =>
      ((await admin(`/admin/accounts/${account.id}/keys`, 'POST', { name, scope })) as { value: string })
        .value;
    const [inference, global, chronosKey] = [
      await key('calls', 'inference'),
      await key('writes', 'global'),
      await key('chronos', 'global'),
    ];
    await admin(`/admin/accounts/${account.id}/credits`, 'POST', { amount: '100.00' });
    const enabled = await fetch(`${url}/api/tools`, {
      method: 'POST',
      headers: { ...bearer(global), 'content-type': 'application/json' },
      body: JSON.stringify({ tool_id: 'chronos' }),
    });
    if (enabled.status >= 300) throw new Error(`chronos: ${enabled.status} ${await enabled.text()}`);

    // The dedicated endpoint, up, then left to hibernate (idle timeout 15 s, the minimum).
    const created = await fetch(`${url}/api/endpoints`, {
      method: 'POST',
      headers: { ...bearer(global), 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'org/sleepy',
        hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
        scaling: { idleTimeoutSeconds: 15 },
      }),
    });
    const { id } = (await created.json()) as { id: string };
    const phaseOf = async () =>
      (
        (await (await fetch(`${url}/api/endpoints/${id}`, { headers: bearer(global) })).json()) as {
          status: string;
        }
      ).status;
    await eventually(async () => (await phaseOf()) === 'up', { timeout: 60_000, description: 'endpoint up' });

    // The Chronos run, every minute.
    const runRes = await fetch(`${url}/api/chronos/runs`, {
      method: 'POST',
      headers: { ...bearer(chronosKey), 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'every minute',
        schedule: '* * * * *',
        timezone: 'UTC',
        steps: [
          { type: 'chat', model: 'bill', messages: [{ role: 'user', content: 'tick' }], max_tokens: 4 },
        ],
      }),
    });
    const run = (await runRes.json()) as { id: string };
    if (runRes.status !== 201) throw new Error(`run: ${runRes.status} ${JSON.stringify(run)}`);
    const runCreatedAt = Date.now();

    await eventually(async () => (await phaseOf()) === 'hibernated', {
      timeout: 60_000,
      interval: 250,
      description: 'endpoint hibernated',
    });
    // The stop starts 15 s before a minute (at least 10 s from now), so the minute's fire is due
    // inside it: Chronos fires, the wake and the billing all meet the stopped server.
    const now = Date.now();
    let stopAt = now - (now % 60_000) + 45_000;
    while (stopAt - Date.now() < 10_000) stopAt += 60_000;

    let phase: Phase = 'before';
    let running = true;
    const calls = Object.fromEntries(PHASES.map((p) => [p, new Tally()])) as Record<Phase, Tally>;
    const writes = Object.fromEntries(PHASES.map((p) => [p, new Tally()])) as Record<Phase, Tally>;
    const latencies: Record<Phase, number[]> = { before: [], stopped: [], after: [] };
    const failures: string[] = [];
    let answered = 0;
    let keysCreated = 0;
    const chat = async () => {
      const at = phase;
      const t0 = performance.now();
      try {
        const res = await fetch(`${url}/api/chat/completions`, {
          method: 'POST',
          headers: { ...bearer(inference), 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'bill', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }),
        });
        const body = await res.text();
        if (res.status === 200) answered++;
        if (res.status === 503 && !(unavailableShape(body, true) && res.headers.get('retry-after'))) {
          calls[at].add('503 in another shape');
          failures.push(`chat 503: ${body.slice(0, 200)}`);
        } else calls[at].add(res.status);
        if (res.status >= 500 && res.status !== 503)
          failures.push(`chat ${res.status}: ${body.slice(0, 200)}`);
      } catch (err) {
        calls[at].add(`error:${(err as Error).message}`);
        failures.push(`chat: ${(err as Error).message}`);
      }
      latencies[at].push(performance.now() - t0);
    };
    const client = async () => {
      while (running) {
        await chat();
        await sleep(20);
      }
    };
    const writer = async () => {
      while (running) {
        const at = phase;
        try {
          const res = await fetch(`${url}/api/keys`, {
            method: 'POST',
            headers: { ...bearer(global), 'content-type': 'application/json' },
            body: JSON.stringify({ name: 'chaos', scope: 'inference' }),
          });
          const body = await res.text();
          if (res.status === 201) keysCreated++;
          if (res.status === 503 && !unavailableShape(body, false)) {
            writes[at].add('503 in another shape');
            failures.push(`key write 503: ${body.slice(0, 200)}`);
          } else writes[at].add(res.status);
          if (res.status >= 500 && res.status !== 503)
            failures.push(`key write ${res.status}: ${body.slice(0, 200)}`);
        } catch (err) {
          writes[at].add(`error:${(err as Error).message}`);
          failures.push(`key write: ${(err as Error).message}`);
        }
        await sleep(500);
      }
    };
    await chat(); // the key is verified (and cached) before the stop
    const loops = [...Array.from({ length: clients }, client), writer()];
    await sleep(Math.max(0, stopAt - 1_000 - Date.now()));

    // The wake, asked for 1 s before the stop: its engine takes 3 s to start, so the stop finds it waking.
    const wakeOutcome = new Tally();
    let wakeMs = 0;
    const wakeCall = (async () => {
      const t0 = performance.now();
      for (let attempt = 0; attempt < 20; attempt++) {
        try {
          const res = await fetch(`${url}/api/d/${id}/chat/completions`, {
            method: 'POST',
            headers: { ...bearer(inference), 'content-type': 'application/json' },
            body: JSON.stringify({ messages: [{ role: 'user', content: 'wake' }], max_tokens: 4 }),
          });
          const body = await res.text();
          const ok503 = res.status === 503 && unavailableShape(body, true);
          wakeOutcome.add(res.status === 503 && !ok503 ? '503 in another shape' : res.status);
          if (res.status >= 500 && !ok503) failures.push(`wake call ${res.status}: ${body.slice(0, 200)}`);
          if (res.status !== 503) break;
          // As the OpenAI SDKs do with a 503: wait Retry-After (capped here at 5 s), then again.
          await sleep(Math.min(5, Number(res.headers.get('retry-after') ?? 1)) * 1000);
        } catch (err) {
          wakeOutcome.add(`error:${(err as Error).message}`);
          failures.push(`wake call: ${(err as Error).message}`);
          break;
        }
      }
      wakeMs = performance.now() - t0;
    })();
    await sleep(Math.max(0, stopAt - Date.now()));
    phase = 'stopped';
    const outputBefore = api.output().length;
    const stoppedAt = Date.now();
    pgServer.stop('immediate');
    await sleep(stopMs);
    // (GET /api/endpoints/{id} reads the database: unreadable while it is stopped is fine.)
    const phaseInStop = (await phaseOf().catch(() => undefined)) ?? 'not readable';
    pgServer.start();
    const restartedAt = Date.now();
    phase = 'after';
    // After the restart: through the next minute's fire and its execution.
    await sleep(Math.max(10_000, 60_000 - (Date.now() % 60_000) + 8_000));
    running = false;
    await Promise.all([...loops, wakeCall]);
    const outageLog = api.output().slice(outputBefore).split('\n');
    const errorLines = outageLog.filter((l) => l.startsWith('{"level":50') || l.startsWith('{"level":60'));
    const warnings = new Tally();
    for (const l of outageLog.filter((x) => x.startsWith('{"level":40')))
      warnings.add(((JSON.parse(l) as { msg?: string }).msg ?? '').slice(0, 90));
    const topWarnings = [...warnings.counts]
      .sort((x, y) => y[1] - x[1])
      .slice(0, 4)
      .map(([msg, n]) => `${n}× "${msg}"`)
      .join('; ');

    // The wake completed (its call answered) and was asked for once; the endpoint answers afterwards
    // (it may have hibernated again since, its idle timeout being 15 s: that call then wakes it).
    const wakeLogs = await (
      await fetch(`${url}/api/endpoints/${id}/logs`, { headers: bearer(global) })
    ).text();
    const wakeEvents = (wakeLogs.match(/event Normal WakeRequested/g) ?? []).length;
    const after = await fetch(`${url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: { ...bearer(inference), 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'after' }], max_tokens: 4 }),
    });
    await after.text();

    // Chronos: one execution per minute since the run was created, each succeeded, one model call each.
    await eventually(
      async () =>
        (
          await sql<{ n: number }>(
            pgServer.url,
            `SELECT count(*)::int AS n FROM chronos_executions WHERE status IN ('queued', 'running')`,
          )
        )[0]!.n === 0,
      { timeout: 30_000, interval: 500 },
    ).catch(() => {});
    const executions = await sql<{ due: string; status: string; late_ms: number }>(
      pgServer.url,
      `SELECT scheduled_for AS due, status::text AS status,
         (EXTRACT(EPOCH FROM (started_at - scheduled_for)) * 1000)::int AS late_ms
       FROM chronos_executions WHERE run_id = $1 ORDER BY scheduled_for`,
      [run.id],
    );
    const dues = executions.map((e) => new Date(e.due).getTime());
    const lastChecked = Date.now() - 10_000;
    const expected: number[] = [];
    for (let t = runCreatedAt - (runCreatedAt % 60_000) + 60_000; t <= lastChecked; t += 60_000)
      expected.push(t);
    const missed = expected
      .filter((t) => !dues.includes(t))
      .map((t) => new Date(t).toISOString().slice(11, 16));
    const doubled = dues
      .filter((t, i) => dues.indexOf(t) !== i)
      .map((t) => new Date(t).toISOString().slice(11, 16));
    const extra = dues
      .filter((t) => !expected.includes(t) && t <= lastChecked)
      .map((t) => new Date(t).toISOString().slice(11, 16));
    const inStop = executions.filter((e) => {
      const t = new Date(e.due).getTime();
      return t >= stoppedAt && t < restartedAt;
    });
    const statuses = new Tally();
    for (const e of executions) statuses.add(e.status);

    // Money, once everything is flushed.
    const money = async () => {
      const [m] = await sql<{ usage: string; charged: string; requests: number; chronos: number }>(
        pgServer.url,
        `SELECT (SELECT COALESCE(sum(cost), 0) FROM metered_usage WHERE account_id = $1)::text AS usage,
           (SELECT COALESCE(-sum(amount), 0) FROM ledger_entries WHERE account_id = $1 AND kind = 'charge')::text AS charged,
           (SELECT COALESCE(sum(requests), 0)::int FROM metered_usage u JOIN api_keys k ON k.id = u.key_id
             WHERE u.account_id = $1 AND u.model = 'bill' AND k.name = 'calls') AS requests,
           (SELECT COALESCE(sum(requests), 0)::int FROM metered_usage u JOIN api_keys k ON k.id = u.key_id
             WHERE u.account_id = $1 AND u.model = 'bill' AND k.name = 'chronos') AS chronos`,
        [account.id],
      );
      const rec = (await admin('/admin/billing/reconciliation', 'GET')) as {
        ok: boolean;
        mismatches: unknown[];
      };
      return { ...m!, reconciled: rec.ok, mismatches: rec.mismatches.length };
    };
    let m = await money();
    const succeeded = statuses.get('succeeded');
    await eventually(
      async () => {
        m = await money();
        return m.usage === m.charged && m.reconciled && m.requests === answered && m.chronos === succeeded;
      },
      { timeout: 30_000, interval: 500 },
    ).catch(() => {});
    const [keys] = await sql<{ n: number }>(
      pgServer.url,
      `SELECT count(*)::int AS n FROM api_keys WHERE name = 'chaos'`,
    );

    const passed =
      failures.length === 0 &&
      m.usage === m.charged &&
      m.reconciled &&
      m.requests === answered &&
      m.chronos === succeeded &&
      missed.length === 0 &&
      doubled.length === 0 &&
      extra.length === 0 &&
      inStop.length === 1 &&
      succeeded === executions.length &&
      after.status === 200 &&
      wakeOutcome.get(200) === 1 &&
      wakeEvents === 1 &&
      keys!.n === keysCreated &&
      errorLines.length <= 5;
    const text = report(
      {
        suite: 'PostgreSQL stopped during billing, Chronos fires and a wake',
        setup: `Local mode (\`npm start\`'s entry point, engine simulator), on a PostgreSQL server of the suite's own stopped with \`pg_ctl stop -m immediate\` for ${stopMs / 1000} s from 15 s before a minute, then started again: ${clients} clients calling an Elastic model back to back (billed), a Chronos run every minute (its fire due inside the stop), a hibernated dedicated endpoint (engine start-up 3 s) called 1 s before the stop (503s retried after Retry-After, as the SDKs do), one writer creating a key every 500 ms.`,
        rows: [
          ['Elastic calls before / during / after', PHASES.map((p) => calls[p].total).join(' / ')],
          ['Elastic outcomes during the stop', calls.stopped.toString()],
          ['Elastic outcomes before + after', `${calls.before} + ${calls.after}`],
          ['Elastic latency during the stop', quantiles(latencies.stopped)],
          ['key writes before / during / after', PHASES.map((p) => writes[p].toString()).join(' / ')],
          [
            '5xx other than 503 in the route shape, transport errors',
            failures.length ? failures.slice(0, 5).join('; ') : 'none',
          ],
          ['error log lines while stopped and after', errorLines.length],
          ['first error line', errorLines[0]?.slice(0, 300) ?? 'none'],
          ['warnings while stopped and after (most frequent)', `${warnings.total}: ${topWarnings || 'none'}`],
          [
            'wake call outcomes (in order of tries)',
            `${wakeOutcome.toString()}; ${Math.round(wakeMs)} ms to the answer`,
          ],
          [
            'endpoint phase at the end of the stop / WakeRequested events / a call afterwards',
            `${phaseInStop} / ${wakeEvents} / ${after.status}`,
          ],
          [
            'Chronos executions (minutes since creation)',
            `${executions.length} (${expected.length}); ${statuses.toString()}; missed ${missed.join(', ') || 'none'}, twice ${doubled.join(', ') || 'none'}, extra ${extra.join(', ') || 'none'}`,
          ],
          [
            'the fire due in the stop',
            inStop
              .map(
                (e) =>
                  `${new Date(e.due).toISOString().slice(11, 19)} ${e.status}, started ${(e.late_ms / 1000).toFixed(1)} s late`,
              )
              .join('; ') || 'none',
          ],
          ['Chronos model calls billed / executions succeeded', `${m.chronos} / ${succeeded}`],
          ['Elastic calls answered 200 / requests in the usage rows', `${answered} / ${m.requests}`],
          [
            'usage cost / ledger charges (micro-units); reconciliation',
            `${m.usage} / ${m.charged} (${m.usage === m.charged ? 'equal' : `differ by ${BigInt(m.usage) - BigInt(m.charged)}`}); ${m.reconciled ? 'ok' : `${m.mismatches} mismatch(es)`}`,
          ],
          ['keys answered 201 / stored', `${keysCreated} / ${keys!.n}`],
        ],
        passed,
      },
      startedAt,
    );
    return { text, passed };
  } finally {
    await api?.stop();
    await engine.close();
    pgServer.destroy();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
