// Every route of the OpenAPI document with generated credentials, paths, headers and bodies
// (fast-check), against a real API on real PostgreSQL in local mode. Guarantees: never a 500 nor
// a 5xx the route does not document (the database is up), and a 4xx answer never changes a row.
// Statuses the route's OpenAPI entry does not list are counted (not failed): they are documentation
// gaps. CHAOS_FUZZ_RUNS cases (default 600), CHAOS_SEED to replay a run.
import { request } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { ADMIN_TOKEN, startTestApi } from '../support/api.ts';
import { sql } from '../support/postgres.ts';
import { knob, report, Tally } from './lib.ts';

interface Operation {
  method: string;
  path: string;
  documented: Set<number>;
}

// Answers any route may give that the per-route entries leave implicit (docs/api.md).
const GENERIC = [400, 401, 403, 404, 405, 413, 415, 429];

function raw(
  url: string,
  o: { method: string; path: string; headers: Record<string, string>; body?: Buffer },
): Promise<{ status: number; body: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: u.hostname, port: u.port, method: o.method, path: o.path, headers: o.headers },
      (res) => {
        let body = '';
        res.setEncoding('utf8').on('data', (d: string) => (body += d.length < 4096 ? d : ''));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', reject);
      },
    );
    req.setTimeout(30_000, () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(o.body);
  });
}

/** One digest of every row the API stores (schema public), minus columns written in the background. */
async function digest(url: string): Promise<string> {
  const tables = await sql<{ t: string }>(
    url,
    `SELECT table_name AS t FROM information_schema.tables
     WHERE table_schema = 'public' AND table_type = 'BASE TABLE' AND table_name <> '_prisma_migrations'
     ORDER BY 1`,
  );
  const parts = tables.map(
    ({ t }) =>
      `SELECT '${t}' AS t, md5(coalesce(string_agg((to_jsonb(x) - 'last_used_at' - 'updated_at')::text, ',' ORDER BY (to_jsonb(x) - 'last_used_at' - 'updated_at')::text), '')) AS h FROM "${t}" x`,
  );
  const rows = await sql<{ t: string; h: string }>(url, parts.join(' UNION ALL '));
  return rows.map((r) => `${r.t}:${r.h}`).join(';');
}

export async function fuzzRoutes(): Promise<{ text: string; passed: boolean }> {
  const startedAt = Date.now();
  const runs = knob('FUZZ_RUNS', 600);
  const seed = knob('SEED', Date.now() % 2 ** 31);
  const dataDir = mkdtempSync(path.join(tmpdir(), 'berth-chaos-fuzz-'));
  const api = await startTestApi({
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: dataDir,
    BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 0',
    KEY_TOUCH_INTERVAL_MS: '3600000',
    LOG_LEVEL: 'silent',
  });
  try {
    const doc = (await (await fetch(`${api.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
    };
    const ops: Operation[] = Object.entries(doc.paths).flatMap(([p, methods]) =>
      Object.entries(methods).map(([m, op]) => ({
        method: m.toUpperCase(),
        path: p,
        documented: new Set([...Object.keys(op.responses).map(Number), ...GENERIC]),
      })),
    );
    const a = await api.newAccount();
    const b = await api.newAccount();
    const credentials: Record<string, string | undefined> = {
      none: undefined,
      admin: `Bearer ${ADMIN_TOKEN}`,
      inference: `Bearer ${a.inference}`,
      compute: `Bearer ${a.compute}`,
      global: `Bearer ${a.global}`,
      otherAccount: `Bearer ${b.global}`,
      malformed: 'Bearer svc_live_' + 'x'.repeat(33),
      garbage: 'Basic Zm9vOmJhcg==',
    };
    // Ids that exist (so routes get past their 404s) next to generated and hostile ones.
    const realIds = [a.id, b.id, 'endpt-doesnotexist1', 'olympus', 'main'];
    const segment = fc.oneof(
      fc.constantFrom(...realIds),
      fc.string({ maxLength: 40 }).map(encodeURIComponent),
      fc.constantFrom(
        '%ff%fe',
        '%',
        '%E0%A4%A',
        '..',
        '%2e%2e',
        '%00',
        'a%0Ab',
        ''.padEnd(3000, 'a'),
        'endpt-%ff',
      ),
    );
    const jsonValue = fc.jsonValue({ maxDepth: 4 });
    const body = fc.oneof(
      jsonValue.map((v) => ({ kind: 'json', bytes: Buffer.from(JSON.stringify(v)) })),
      fc
        .dictionary(
          fc.constantFrom(
            'name',
            'scope',
            'model',
            'messages',
            'max_tokens',
            'stream',
            'amount',
            'tool_id',
            'hardware',
            'scaling',
            'authMode',
            'pinnedModel',
            'kind',
            'backends',
          ),
          jsonValue,
        )
        .map((v) => ({ kind: 'fields', bytes: Buffer.from(JSON.stringify(v)) })),
      fc.string({ maxLength: 200 }).map((s) => ({ kind: 'text', bytes: Buffer.from(s) })),
      fc.uint8Array({ maxLength: 300 }).map((u) => ({ kind: 'bytes', bytes: Buffer.from(u) })),
      fc.constant({ kind: 'deep', bytes: Buffer.from('{"x":' + '['.repeat(5000) + ']'.repeat(5000) + '}') }),
      fc.constant({ kind: 'none', bytes: Buffer.alloc(0) }),
    );
    const contentType = fc.constantFrom(
      'application/json',
      'application/json; charset=utf-8',
      'application/json; charset=latin1',
      'text/plain',
      'application/x-www-form-urlencoded',
      undefined,
    );
    const encoding = fc.constantFrom(
      undefined,
      undefined,
      undefined,
      'gzip',
      'br',
      'deflate',
      'identity',
      'x-nope',
    );
    const query = fc.oneof(
      fc.constant(''),
      fc.string({ maxLength: 30 }).map((s) => '?' + encodeURIComponent(s) + '=1'),
      fc.constant('?limit=-1&cursor=%ff'),
    );

    const statuses = new Tally();
    const undocumented = new Tally();
    const failures: string[] = [];
    let unchanged = 0;
    let cases = 0;
    let before = await digest(api.db.url);
    await fc
      .assert(
        fc.asyncProperty(
          fc.constantFrom(...ops),
          fc.constantFrom(...Object.keys(credentials)),
          fc.array(segment, { minLength: 3, maxLength: 3 }),
          body,
          contentType,
          encoding,
          query,
          fc.boolean(),
          async (op, cred, segs, payload, ctype, enc, q, wrongMethod) => {
            cases++;
            let i = 0;
            const p = op.path.replace(/\{[^}]+\}/g, () => segs[i++]!) + q;
            const method = wrongMethod && cases % 5 === 0 ? 'PATCH' : op.method;
            const headers: Record<string, string> = {};
            if (credentials[cred]) headers.authorization = credentials[cred]!;
            if (payload.kind !== 'none' && ['POST', 'PUT', 'PATCH', 'DELETE'].includes(method)) {
              if (ctype) headers['content-type'] = ctype;
              if (enc) headers['content-encoding'] = enc;
              headers['content-length'] = String(payload.bytes.length);
            }
            const send = headers['content-length'] ? payload.bytes : undefined;
            let res: { status: number; body: string };
            try {
              res = await raw(api.url, { method, path: p, headers, ...(send ? { body: send } : {}) });
            } catch (err) {
              failures.push(
                `${method} ${p.slice(0, 80)} [${cred}, ${payload.kind}]: ${(err as Error).message}`,
              );
              return;
            }
            statuses.add(res.status);
            const label = `${method} ${op.path} → ${res.status}`;
            if (res.status === 500 || (res.status > 500 && !op.documented.has(res.status))) {
              failures.push(
                `${method} ${p.slice(0, 80)} [${cred}, ${payload.kind}, ${ctype ?? '-'}, ${enc ?? '-'}] → ${res.status} ${res.body.slice(0, 120)}`,
              );
            } else if (!op.documented.has(res.status) && method === op.method) undocumented.add(label);
            const after = await digest(api.db.url);
            if (res.status >= 400 && res.status < 500) {
              if (after !== before)
                failures.push(
                  `${method} ${p.slice(0, 80)} [${cred}, ${payload.kind}] → ${res.status} changed rows`,
                );
              else unchanged++;
            }
            before = after;
          },
        ),
        { numRuns: runs, seed, endOnFailure: false, interruptAfterTimeLimit: knob('FUZZ_TIME_MS', 600_000) },
      )
      .catch(() => {});
    const fiveHundreds = failures.length;
    const passed = fiveHundreds === 0;
    const distinct = [...new Set(failures.map((f) => f.replace(/\s+/g, ' ')))];
    const text = report(
      {
        suite: 'Fuzzing every route (fast-check)',
        setup: `${ops.length} operations from /openapi.json × ${Object.keys(credentials).length} credentials (none, admin, each key scope, another account's key, malformed, Basic) × generated path ids (real, random, malformed percent-encoding, 3,000 characters) × bodies (JSON values, known fields with random values, text, random bytes, 5,000-deep arrays) × Content-Type × Content-Encoding × query strings, sometimes the wrong method; raw HTTP (node:http). Seed ${seed}. Every 4xx checked against a digest of every table.`,
        rows: [
          ['cases run', cases],
          ['statuses', statuses.toString()],
          ['500s (or undocumented 5xx) / transport errors / rows changed by a 4xx', fiveHundreds],
          ['4xx answers with no row changed', unchanged],
          [
            'distinct failures (first 15)',
            distinct
              .slice(0, 15)
              .map((f) => `\`${f.replace(/\|/g, '\\|')}\``)
              .join('<br>') || 'none',
          ],
          [
            'statuses a route does not document (route → status: count)',
            undocumented.toString().replace(/\|/g, '\\|'),
          ],
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
