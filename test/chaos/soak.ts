// A mixed load on two API processes (`npm start`'s entry point) on one PostgreSQL for
// CHAOS_SOAK_MINUTES (default 20, as the probe that found a pg.Client used by two queries at once):
// Elastic calls streamed and not, managed tool calls (one whose result is past the MCP limit), Olympus
// dry runs, keys created and revoked, catalog writes, Chronos runs created, triggered, listed and
// deleted, streams cut by the client after their first bytes — half through each replica — and
// calls to a dedicated endpoint, streamed and not (replica A runs it in local mode, one engine process),
// CHAOS_SOAK_WORKERS (4) loops at once. Guarantees: no answer is a 5xx, neither process logs an error
// or node-postgres's "client is already executing a query", both are ready at the end, no execution
// is left queued or running, the usage rows' cost equals the ledger's charges to the micro-unit and
// the ledger reconciles. Figures for a long run: each replica's RSS and V8 heap sampled every
// CHAOS_SOAK_SAMPLE_SECONDS (15) with their slopes by a least-squares fit (whole run and second
// half), the p99 of every CHAOS_SOAK_WINDOW_MINUTES (5) window, the machine's load through the run.
// With CHAOS_SOAK_HEAP_SNAPSHOTS=<directory>, each replica writes a V8 heap snapshot (which collects
// all garbage first) after the warm-up and at the end, and the report gives the heap in use right
// after each: what a replica retains, where the sampled heap also counts garbage not yet collected.
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { startEngineSim } from '@berth/engine-sim';
import { bearer, spawnApi, type ApiProcess } from '../support/api.ts';
import { eventually } from '../support/eventually.ts';
import { startMcpServer } from '../support/mcp-server.ts';
import { createTestDatabase, sql } from '../support/postgres.ts';
import { percentile } from '../bench/stats.ts';
import { knob, quantiles, report, Tally } from './lib.ts';

const ADMIN = 'chaos-soak-admin-token-0123';

const rssMb = (p: ApiProcess) =>
  Math.round(
    Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${p.child.pid}/status`, 'utf8'))?.[1] ?? 0) / 1024,
  );

/** The process's V8 heap in use (MB), from its /metrics; NaN when it did not answer. */
async function heapMb(p: ApiProcess): Promise<number> {
  try {
    const text = await (await fetch(`${p.url}/metrics`)).text();
    return Number(/^berth_api_nodejs_heap_size_used_bytes (\S+)$/m.exec(text)?.[1] ?? NaN) / 1024 / 1024;
  } catch {
    return NaN;
  }
}

/**
 * The V8 heap in use (MB) right after a heap snapshot, which collects all garbage first: the replica
 * was started with --heapsnapshot-signal=SIGUSR2 and writes its snapshots into `dir`.
 */
async function heapAfterGc(p: ApiProcess, dir: string): Promise<number> {
  const before = new Set(readdirSync(dir));
  p.child.kill('SIGUSR2');
  const file = await eventually(
    () => readdirSync(dir).find((f) => !before.has(f) && f.endsWith('.heapsnapshot')) ?? false,
    { timeout: 120_000, interval: 250, description: 'the heap snapshot is started' },
  );
  // Written on the main thread: done when its size stops changing.
  for (let size = -1; ;) {
    await new Promise((r) => setTimeout(r, 1_000));
    const now = statSync(path.join(dir, file)).size;
    if (now === size && now > 0) break;
    size = now;
  }
  return heapMb(p);
}

/** Least-squares slope of y over x (per unit of x); NaN with fewer than 3 points. */
function slope(points: readonly (readonly [number, number])[]): number {
  const ps = points.filter(([, y]) => Number.isFinite(y));
  if (ps.length < 3) return NaN;
  const mx = ps.reduce((s, [x]) => s + x, 0) / ps.length;
  const my = ps.reduce((s, [, y]) => s + y, 0) / ps.length;
  let num = 0;
  let den = 0;
  for (const [x, y] of ps) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? NaN : num / den;
}

interface Sample {
  /** Minutes since the load started. */
  t: number;
  rss: number[];
  heap: number[];
  load: number;
}

/** `A +1.23, B +0.45 MB/min over the run; … over its second half`: one series' slopes per replica. */
function slopes(samples: readonly Sample[], pick: (s: Sample) => number[]): string {
  const half = samples.filter((s) => s.t >= (samples.at(-1)?.t ?? 0) / 2);
  const fmt = (ss: readonly Sample[]) =>
    [0, 1]
      .map((r) => {
        const v = slope(ss.map((s) => [s.t, pick(s)[r]!] as const));
        return `${'AB'[r]} ${Number.isFinite(v) ? (v >= 0 ? '+' : '') + v.toFixed(2) : 'n/a'}`;
      })
      .join(', ');
  return `${fmt(samples)} MB/min over the run; ${fmt(half)} MB/min over its second half`;
}

export async function soak(): Promise<{ text: string; passed: boolean }> {
  const startedAt = Date.now();
  const minutes = knob('SOAK_MINUTES', 20);
  const workers = knob('SOAK_WORKERS', 4);
  const db = await createTestDatabase('chaos_soak');
  const sampleSeconds = knob('SOAK_SAMPLE_SECONDS', 15);
  const windowMinutes = knob('SOAK_WINDOW_MINUTES', 5);
  const [engine, long, mcp] = await Promise.all([
    startEngineSim({ model: 'org/soak', ttftMs: 2, itlMs: 1, outputTokens: 16, maxModelLen: 1_000_000 }),
    // Streams the client cuts after their first bytes: 400 tokens at 5 ms each.
    startEngineSim({
      model: 'org/soak-long',
      ttftMs: 2,
      itlMs: 5,
      outputTokens: 400,
      maxModelLen: 1_000_000,
    }),
    startMcpServer(),
  ]);
  const snapshots = process.env.CHAOS_SOAK_HEAP_SNAPSHOTS;
  const snapshotEnv = (replica: 'A' | 'B'): Record<string, string> => {
    if (!snapshots) return {};
    const dir = path.resolve(snapshots, replica);
    mkdirSync(dir, { recursive: true });
    const options = `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${dir}`;
    return { NODE_OPTIONS: [process.env.NODE_OPTIONS, options].filter(Boolean).join(' ') };
  };
  const env = {
    DATABASE_URL: db.url,
    ADMIN_TOKEN: ADMIN,
    BILLING_FLUSH_INTERVAL_MS: '500',
  };
  // Replica A also runs a dedicated endpoint on this machine (local mode: one API process may); the
  // dedicated calls go through A, everything else through both.
  const dataDir = mkdtempSync(path.join(tmpdir(), 'berth-soak-'));
  const a = await spawnApi({
    ...env,
    ...snapshotEnv('A'),
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: dataDir,
    BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 2 --itl-ms 1 --output-tokens 16',
  }); // the first installs pg-boss's schema
  const b = await spawnApi({ ...env, ...snapshotEnv('B') });
  const retained = async () =>
    snapshots
      ? await Promise.all(replicas.map((p, r) => heapAfterGc(p, path.resolve(snapshots, 'AB'[r]!))))
      : undefined;
  const replicas = [a, b];
  const admin = (api: ApiProcess, p: string, method: string, body?: unknown) =>
    fetch(api.url + p, {
      method,
      headers: {
        authorization: `Bearer ${ADMIN}`,
        'content-type': 'application/json',
        'idempotency-key': randomUUID(),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
  const statuses = new Tally();
  /** [ms since the load started, latency ms] of every answered request. */
  const latency: [number, number][] = [];
  let loadStart = Date.now();
  const failures: string[] = [];
  try {
    const model = (name: string) => ({
      kind: 'chat',
      backends:
        name === 'soak-long'
          ? [{ baseUrl: `${long.url}/v1`, model: 'org/soak-long' }]
          : [{ baseUrl: `${engine.url}/v1`, model: 'org/soak' }],
      pricing: { inputPerMTok: '0.01', outputPerMTok: '0.02' },
      ...(name === 'soak' || name === 'soak-long' ? {} : { fallbacks: ['soak'] }),
    });
    for (const name of ['soak', 'soak-long'])
      if ((await admin(a, `/admin/models/${name}`, 'PUT', model(name))).status !== 201)
        throw new Error('model');
    const tool = { description: 'soak tools', url: mcp.url, price_per_call: '0.0001', timeout_ms: 30_000 };
    if ((await admin(a, '/admin/tools/box', 'PUT', tool)).status !== 201) throw new Error('tool');
    const { account } = (await (await admin(a, '/admin/accounts', 'POST', { name: 'soak' })).json()) as {
      account: { id: string };
    };
    const global = (
      (await (
        await admin(a, `/admin/accounts/${account.id}/keys`, 'POST', { name: 'g', scope: 'global' })
      ).json()) as {
        value: string;
      }
    ).value;
    await admin(a, `/admin/accounts/${account.id}/credits`, 'POST', { amount: '1000.00' });
    for (const id of ['box', 'chronos', 'olympus'])
      await fetch(`${a.url}/api/tools`, {
        method: 'POST',
        headers: { ...bearer(global), 'content-type': 'application/json' },
        body: JSON.stringify({ tool_id: id }),
      });
    const created = await fetch(`${a.url}/api/endpoints`, {
      method: 'POST',
      headers: { ...bearer(global), 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'org/soak-dedicated',
        hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
        scaling: { minReplicas: 1, maxReplicas: 1 },
      }),
    });
    if (created.status !== 201) throw new Error(`endpoint: ${created.status} ${await created.text()}`);
    const endpointId = ((await created.json()) as { id: string }).id;
    await eventually(
      async () =>
        (
          (await (
            await fetch(`${a.url}/api/endpoints/${endpointId}`, { headers: bearer(global) })
          ).json()) as {
            status: string;
          }
        ).status === 'up',
      { timeout: 120_000, interval: 500, description: 'the dedicated endpoint is up' },
    );
    await eventually(
      async () => (await fetch(`${b.url}/api/models/soak`, { headers: bearer(global) })).status === 200,
      {
        timeout: 30_000,
        description: 'replica B serves the model',
      },
    );

    /** One request, counted by its label and status; with `/admin` paths the admin token is sent. */
    const call = async (
      label: string,
      api: ApiProcess,
      method: string,
      p: string,
      body?: unknown,
    ): Promise<{ status: number; json(): Record<string, unknown> }> => {
      const t = Date.now();
      try {
        const res = p.startsWith('/admin/')
          ? await admin(api, p, method, body)
          : await fetch(api.url + p, {
              method,
              headers: { ...bearer(global), 'content-type': 'application/json' },
              ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
            });
        const text = await res.text();
        latency.push([t - loadStart, Date.now() - t]);
        statuses.add(`${label} ${res.status}`);
        if (res.status >= 500) failures.push(`${label} ${res.status}: ${text.slice(0, 200)}`);
        return { status: res.status, json: () => JSON.parse(text) as Record<string, unknown> };
      } catch (err) {
        statuses.add(`${label} error`);
        failures.push(`${label}: ${(err as Error).message}`);
        return { status: 0, json: () => ({}) };
      }
    };
    const hello = [{ role: 'user', content: 'Hello' }];
    /** A stream of 400 tokens cut by the client once its first bytes arrived. */
    const cut = async (api: ApiProcess) => {
      const t = Date.now();
      const abort = new AbortController();
      try {
        const res = await fetch(`${api.url}/api/chat/completions`, {
          method: 'POST',
          headers: { ...bearer(global), 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'soak-long', messages: hello, stream: true }),
          signal: abort.signal,
        });
        statuses.add(`stream cut ${res.status}`);
        if (res.status >= 500) failures.push(`stream cut ${res.status}: ${(await res.text()).slice(0, 200)}`);
        else await res.body?.getReader().read();
        latency.push([t - loadStart, Date.now() - t]);
        abort.abort();
      } catch (err) {
        statuses.add('stream cut error');
        failures.push(`stream cut: ${(err as Error).message}`);
      }
    };
    const runs: string[] = [];
    const actions: ((api: ApiProcess, i: number) => Promise<unknown>)[] = [
      (api) =>
        call('chat', api, 'POST', '/api/chat/completions', { model: 'soak', messages: hello, max_tokens: 8 }),
      (api) =>
        call('chat stream', api, 'POST', '/api/chat/completions', {
          model: 'soak',
          messages: hello,
          stream: true,
        }),
      (api) =>
        call('auto', api, 'POST', '/api/chat/completions', { model: 'auto', messages: hello, max_tokens: 8 }),
      (api) =>
        call('tools', api, 'POST', '/api/chat/completions', {
          model: 'soak',
          messages: [
            { role: 'user', content: 'Plan:\ncall weather {"city": "Oslo"}\ncall huge {"bytes": 2000000}' },
          ],
          tools: [{ type: 'mcp', server_label: 'box' }],
        }),
      (api) => call('dry run', api, 'POST', '/api/olympus/route', { messages: hello }),
      () =>
        call('dedicated', a, 'POST', `/api/d/${endpointId}/chat/completions`, {
          messages: hello,
          max_tokens: 8,
        }),
      () =>
        call('dedicated stream', a, 'POST', `/api/d/${endpointId}/chat/completions`, {
          messages: hello,
          stream: true,
        }),
      async (api, i) => {
        const made = await call('key create', api, 'POST', '/api/keys', {
          name: `k${i}`,
          scope: 'inference',
        });
        const id = made.json().id as string | undefined;
        if (id) await call('key revoke', replicas[(i + 1) % 2]!, 'DELETE', `/api/keys/${id}`);
      },
      (api, i) => call('catalog', api, 'PUT', `/admin/models/scratch-${i % 5}`, model('scratch')),
      (api) => cut(api),
      async (api, i) => {
        const made = await call('run create', api, 'POST', '/api/chronos/runs', {
          name: `soak-${i}`,
          schedule: '* * * * *',
          timezone: 'UTC',
          steps: [{ type: 'chat', model: 'soak', messages: hello, max_tokens: 4 }],
        });
        const id = made.json().id as string | undefined;
        if (!id) return;
        runs.push(id);
        await call('run trigger', replicas[(i + 1) % 2]!, 'POST', `/api/chronos/runs/${id}/trigger`);
        await call('run list', api, 'GET', '/api/chronos/runs?limit=10');
        // At most 20 runs at a time (each fires every minute); the oldest goes.
        if (runs.length > 20) await call('run delete', api, 'DELETE', `/api/chronos/runs/${runs.shift()!}`);
      },
    ];
    const rssBefore = replicas.map(rssMb);
    const samples: Sample[] = [];
    const sample = async () => {
      const rss = replicas.map(rssMb);
      const heap = await Promise.all(replicas.map(heapMb));
      samples.push({ t: (Date.now() - loadStart) / 60_000, rss, heap, load: loadavg()[0]! });
    };
    const retainedBefore = await retained();
    loadStart = Date.now();
    await sample();
    const sampler = setInterval(() => void sample(), sampleSeconds * 1000);
    const until = Date.now() + minutes * 60_000;
    let n = 0;
    try {
      await Promise.all(
        Array.from({ length: workers }, async (_, w) => {
          while (Date.now() < until) {
            const i = n++;
            await actions[(i + w) % actions.length]!(replicas[i % 2]!, i);
          }
        }),
      );
    } finally {
      clearInterval(sampler);
    }
    await sample();
    const loadMs = Date.now() - loadStart;
    const retainedAfter = await retained();
    // Executions triggered last are given time to end.
    const stuck = async () =>
      (
        await sql<{ n: number }>(
          db.url,
          `SELECT count(*)::int AS n FROM chronos_executions WHERE status IN ('queued', 'running')`,
        )
      )[0]!.n;
    await eventually(async () => (await stuck()) === 0, { timeout: 60_000, interval: 500 }).catch(() => {});
    const executions = await sql<{ status: string; n: number }>(
      db.url,
      'SELECT status, count(*)::int AS n FROM chronos_executions GROUP BY status ORDER BY status',
    );
    // Money: what the usage rows say was spent is what the ledger charged, once both replicas flushed.
    const money = async () => {
      const [m] = await sql<{ usage: string; charged: string; balance: string; credits: string }>(
        db.url,
        `SELECT (SELECT COALESCE(sum(cost), 0) FROM metered_usage WHERE account_id = $1)::text AS usage,
           (SELECT COALESCE(-sum(amount), 0) FROM ledger_entries
             WHERE account_id = $1 AND kind = 'charge')::text AS charged,
           (SELECT balance FROM billing_accounts WHERE account_id = $1)::text AS balance,
           (SELECT COALESCE(sum(amount), 0) FROM ledger_entries
             WHERE account_id = $1 AND kind <> 'charge')::text AS credits`,
        [account.id],
      );
      const rec = (await (await admin(a, '/admin/billing/reconciliation', 'GET')).json()) as {
        ok: boolean;
        mismatches: unknown[];
      };
      return { ...m!, reconciled: rec.ok, mismatches: rec.mismatches.length };
    };
    let m = await money();
    await eventually(
      async () => {
        m = await money();
        return m.usage === m.charged && m.reconciled;
      },
      { timeout: 30_000, interval: 500 },
    ).catch(() => {});
    const usageRows = await sql<{ model: string; requests: number; completion: string; cost: string }>(
      db.url,
      `SELECT CASE WHEN model LIKE 'tool:%' THEN 'tool:*' WHEN model LIKE 'scratch%' THEN 'scratch-*' ELSE model END
         AS model, sum(requests)::int AS requests, sum(completion_tokens)::text AS completion, sum(cost)::text AS cost
       FROM metered_usage WHERE account_id = $1 GROUP BY 1 ORDER BY 1`,
      [account.id],
    );
    const micro = (v: string) => `$${(Number(v) / 1e6).toFixed(6)}`;
    const moneyExact = m.usage === m.charged && m.reconciled && BigInt(m.balance) >= 0n;
    const ready = await Promise.all(replicas.map(async (p) => (await fetch(`${p.url}/readyz`)).status));
    const rssAfter = replicas.map(rssMb);
    const logs = replicas.map((p) => p.output());
    const concurrent = logs.map(
      (o) => o.split('\n').filter((l) => l.includes('already executing a query')).length,
    );
    const errors = logs.map((o) => o.split('\n').filter((l) => l.startsWith('{"level":50')));
    const left = await stuck();
    const passed =
      failures.length === 0 &&
      concurrent.every((c) => c === 0) &&
      errors.every((e) => e.length === 0) &&
      ready.every((s) => s === 200) &&
      left === 0 &&
      moneyExact;
    // p99 of each window of the load, by when the request started.
    const windows: number[][] = [];
    for (const [at, ms] of latency)
      if (at >= 0) (windows[Math.floor(at / (windowMinutes * 60_000))] ??= []).push(ms);
    const p99s = windows
      .filter((w) => w && w.length)
      .map((w) =>
        Math.round(
          percentile(
            [...w].sort((x, y) => x - y),
            99,
          ),
        ),
      );
    const loads = samples.map((s) => s.load);
    return {
      passed,
      text: report(
        {
          suite: 'Soak: a mixed load on two API processes',
          passed,
          setup: `Two \`npm start\` processes on one PostgreSQL for ${minutes} min, ${workers} loops at once over ${actions.length} actions (Elastic calls streamed and not, \`auto\`, managed tools with one result past the MCP limit, Olympus dry runs, keys created on one replica and revoked on the other, catalog writes, Chronos runs created, triggered on the other replica, listed, deleted, streams cut by the client after their first bytes), alternating replicas.`,
          rows: [
            ['requests', statuses.total],
            ['answers', statuses.toString()],
            ['requests a second', (statuses.total / (loadMs / 1000)).toFixed(1)],
            ['latency', quantiles(latency.map(([, ms]) => ms))],
            [
              `p99 per ${windowMinutes}-minute window (first → last)`,
              p99s.length
                ? `${p99s.map((p) => `${p} ms`).join(', ')} (${p99s[0]} → ${p99s.at(-1)} ms)`
                : 'n/a',
            ],
            ['5xx or transport errors', failures.length ? failures.slice(0, 5).join('; ') : 'none'],
            ['"client is already executing a query" (A, B)', concurrent.join(', ')],
            ['error log lines (A, B)', errors.map((e) => e.length).join(', ')],
            ['first error line', errors.flat()[0]?.slice(0, 300) ?? 'none'],
            ['Chronos executions', executions.map((e) => `${e.status}: ${e.n}`).join(', ') || 'none'],
            ['executions left queued or running', left],
            ['/readyz at the end (A, B)', ready.join(', ')],
            ['RSS (A, B)', `${rssBefore.join(' / ')} MB → ${rssAfter.join(' / ')} MB`],
            ['RSS slope (least squares)', slopes(samples, (s) => s.rss)],
            [
              'V8 heap used (A, B)',
              `${samples[0]?.heap.map((h) => h.toFixed(0)).join(' / ')} MB → ${samples
                .at(-1)
                ?.heap.map((h) => h.toFixed(0))
                .join(' / ')} MB; ${slopes(samples, (s) => s.heap)}`,
            ],
            ...(retainedBefore && retainedAfter
              ? [
                  [
                    'V8 heap after a full GC (A, B; heap snapshots at the start and the end)',
                    `${retainedBefore.map((h) => h.toFixed(0)).join(' / ')} MB → ${retainedAfter
                      .map((h) => h.toFixed(0))
                      .join(' / ')} MB (snapshots in ${path.resolve(snapshots!)})`,
                  ] as [string, string],
                ]
              : []),
            [`samples (every ${sampleSeconds} s)`, samples.length],
            [
              'usage rows (per model: requests, completion tokens, cost)',
              usageRows.map((u) => `${u.model}: ${u.requests}, ${u.completion}, ${micro(u.cost)}`).join('; '),
            ],
            [
              'usage cost / ledger charges (micro-units)',
              `${m.usage} / ${m.charged} (${m.usage === m.charged ? 'equal' : `differ by ${BigInt(m.usage) - BigInt(m.charged)}`})`,
            ],
            [
              'balance = credits − charges; reconciliation',
              `${micro(m.balance)} = ${micro(m.credits)} − ${micro(m.charged)}; ${m.reconciled ? 'ok' : `${m.mismatches} mismatch(es)`}`,
            ],
            [
              '1-minute load average through the run',
              loads.length
                ? `mean ${(loads.reduce((x, y) => x + y, 0) / loads.length).toFixed(1)}, min ${Math.min(...loads).toFixed(1)}, max ${Math.max(...loads).toFixed(1)}`
                : 'n/a',
            ],
          ],
        },
        startedAt,
      ),
    };
  } finally {
    await Promise.all(replicas.map((p) => p.stop()));
    await Promise.all([engine.close(), long.close(), mcp.close()]);
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
