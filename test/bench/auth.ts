// Authenticated request overhead (issue 2): the same API process answers an unauthenticated no-op
// route (/healthz) and an authenticated one (/api/models with a warm key), alternating batches so
// both see the same machine load. Also counts the database transactions the authenticated requests
// cause, from PostgreSQL's own statistics: a warm key must cost none.
import { Agent, request } from 'undici';
import pg from 'pg';
import { startTestApi } from '../support/api.ts';
import { transactionCount as xactCount } from '../support/postgres.ts';
import { machine, ms, summarize } from './stats.ts';

const N = Number(process.env.BENCH_AUTH_REQUESTS ?? 20_000);
const BATCH = 500;

export async function benchAuth(): Promise<string> {
  const api = await startTestApi({ KEY_TOUCH_INTERVAL_MS: String(3_600_000) });
  try {
    const acct = await api.newAccount();
    const dispatcher = new Agent({ connections: 1, pipelining: 1 });
    const one = async (path: string, headers: Record<string, string>) => {
      const t = process.hrtime.bigint();
      const res = await request(api.url + path, { headers, dispatcher });
      await res.body.arrayBuffer();
      if (res.statusCode !== 200) throw new Error(`${path}: ${res.statusCode}`);
      return Number(process.hrtime.bigint() - t) / 1e6;
    };
    const auth = { authorization: `Bearer ${acct.inference}` };
    for (let i = 0; i < 500; i++) {
      await one('/healthz', {});
      await one('/api/models', auth);
    }
    // Autovacuum's analyze of the new tables would count as transactions too: keep it out.
    const c = new pg.Client({ connectionString: api.db.url });
    await c.connect();
    for (const t of ['accounts', 'api_keys', '_prisma_migrations']) {
      await c.query(`ALTER TABLE "${t}" SET (autovacuum_enabled = false)`);
    }
    await c.end();
    // The set-up's own queries (signup, key creation, the warm-up's one lookup) reach the
    // statistics only when their pooled connections close (the pool's 10 s idle timeout): wait
    // past it, or they would be counted against the measured requests.
    await new Promise((r) => setTimeout(r, 12_000));
    // Reading the counter costs transactions of its own: measure that with nothing in between.
    const idle0 = await xactCount(api.db.url);
    const before = await xactCount(api.db.url);
    const readCost = before - idle0;
    const plain: number[] = [];
    const authed: number[] = [];
    for (let done = 0; done < N; done += BATCH) {
      for (let i = 0; i < BATCH; i++) plain.push(await one('/healthz', {}));
      for (let i = 0; i < BATCH; i++) authed.push(await one('/api/models', auth));
    }
    const after = await xactCount(api.db.url);
    const queries = after - before - readCost;
    const p = summarize(plain);
    const a = summarize(authed);
    await dispatcher.close();
    return [
      `### Authenticated request overhead (${new Date().toISOString().slice(0, 10)}, ${machine()})`,
      '',
      `${N} requests each, one keep-alive connection, sequential, same process, batches of ${BATCH} alternating.`,
      '',
      '| route | p50 | p99 | mean |',
      '|---|---|---|---|',
      `| \`GET /healthz\` (no auth) | ${ms(p.p50)} | ${ms(p.p99)} | ${ms(p.mean)} |`,
      `| \`GET /api/models\` (warm inference key) | ${ms(a.p50)} | ${ms(a.p99)} | ${ms(a.mean)} |`,
      `| ratio authenticated / unauthenticated | ${(a.p50 / p.p50).toFixed(2)}× | ${(a.p99 / p.p99).toFixed(2)}× | ${(a.mean / p.mean).toFixed(2)}× |`,
      '',
      `Database transactions during the ${N} authenticated requests (pg_stat_database): **${queries}** ` +
        `(${(queries / N).toFixed(4)} per request; autovacuum off for the run, the counter's own reads subtracted).`,
    ].join('\n');
  } finally {
    await api.stop();
  }
}
