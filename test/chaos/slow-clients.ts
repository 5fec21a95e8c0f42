// Slow and abusive clients against one API process (local mode, real PostgreSQL): slowloris headers,
// slowly dripped bodies, idle connections, a 10 MB body, and clients that never read their stream,
// all at once for CHAOS_ABUSE_MS (default 75 s: past the 60 s headers timeout). Meanwhile a
// well-behaved client keeps calling. Guarantees: the well-behaved client never fails, the API's
// memory stays bounded (RSS growth under CHAOS_RSS_LIMIT_MB, default 300 MB), oversized bodies get
// 413. The figures also say which abusive connections the server closed, and when.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ADMIN_TOKEN, bearer, spawnApi } from '../support/api.ts';
import { eventually } from '../support/eventually.ts';
import { createTestDatabase } from '../support/postgres.ts';
import { knob, quantiles, report, sleep, Tally } from './lib.ts';

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}
const fds = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;

/** A socket to the API that tracks when the server closed it. */
function open(port: number, closedAt: number[], startedAt: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => resolve(s));
    s.on('error', () => {});
    s.on('data', () => {});
    s.once('close', () => closedAt.push(Date.now() - startedAt));
    s.once('error', reject);
  });
}

export async function slowClients(): Promise<{ text: string; passed: boolean }> {
  const startedAt = Date.now();
  const abuseMs = knob('ABUSE_MS', 75_000);
  const idle = knob('IDLE_CONNECTIONS', 1000);
  const loris = knob('SLOWLORIS', 100);
  const drip = knob('SLOW_BODIES', 100);
  const readers = knob('NON_READERS', 10);
  const db = await createTestDatabase('chaos_slow');
  const dataDir = mkdtempSync(path.join(tmpdir(), 'berth-chaos-slow-'));
  const api = await spawnApi({
    DATABASE_URL: db.url,
    ADMIN_TOKEN,
    BERTH_RUNTIME: 'local',
    BERTH_DATA_DIR: dataDir,
    BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 1 --output-tokens 3000',
  }).catch(async (err) => {
    await db.drop();
    throw err;
  });
  const port = Number(new URL(api.url).port);
  const pid = api.child.pid!;
  const sockets: Socket[] = [];
  try {
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };
    const { account, key } = (await (
      await fetch(`${api.url}/admin/accounts`, { method: 'POST', headers: admin, body: '{}' })
    ).json()) as { account: { id: string }; key: { value: string } };
    const compute = (
      (await (
        await fetch(`${api.url}/admin/accounts/${account.id}/keys`, {
          method: 'POST',
          headers: admin,
          body: JSON.stringify({ name: 'c', scope: 'global' }),
        })
      ).json()) as { value: string }
    ).value;
    const { id } = (await (
      await fetch(`${api.url}/api/endpoints`, {
        method: 'POST',
        headers: { ...bearer(compute), 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'org/slow',
          hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
          scaling: { idleTimeoutSeconds: 3600 },
        }),
      })
    ).json()) as { id: string };
    await eventually(
      async () =>
        (
          (await (await fetch(`${api.url}/api/endpoints/${id}`, { headers: bearer(compute) })).json()) as {
            status: string;
          }
        ).status === 'up',
      { timeout: 60_000, description: 'endpoint up' },
    );

    // The well-behaved client: a short completion and a key listing, back to back.
    const good = async (samples: number[], outcomes: Tally, until: () => boolean) => {
      while (!until()) {
        const t0 = performance.now();
        try {
          const r = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
            method: 'POST',
            headers: { ...bearer(key.value), 'content-type': 'application/json' },
            body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
            signal: AbortSignal.timeout(10_000),
          });
          await r.arrayBuffer();
          outcomes.add(r.status);
        } catch (err) {
          outcomes.add(`error: ${(err as Error).name}`);
        }
        samples.push(performance.now() - t0);
        await sleep(50);
      }
    };
    const baseline: number[] = [];
    const baselineOutcomes = new Tally();
    const baselineEnd = Date.now() + 10_000;
    await good(baseline, baselineOutcomes, () => Date.now() > baselineEnd);
    const rssBefore = rssMb(pid);
    const fdsBefore = fds(pid);

    const t0 = Date.now();
    const closed = {
      idle: [] as number[],
      loris: [] as number[],
      drip: [] as number[],
      readers: [] as number[],
    };
    const timers: NodeJS.Timeout[] = [];
    // 1. Idle connections: connected, never a byte.
    for (let i = 0; i < idle; i++) sockets.push(await open(port, closed.idle, t0));
    // 2. Slowloris: a request line, then one header line every 5 s, never the blank line.
    for (let i = 0; i < loris; i++) {
      const s = await open(port, closed.loris, t0);
      sockets.push(s);
      s.write(`POST /api/keys HTTP/1.1\r\nHost: x\r\n`);
      let n = 0;
      timers.push(setInterval(() => s.writable && s.write(`X-Slow-${n++}: y\r\n`), 5_000));
    }
    // 3. Slow bodies: complete headers (no key), then the body one byte a second.
    for (let i = 0; i < drip; i++) {
      const s = await open(port, closed.drip, t0);
      sockets.push(s);
      s.write(
        `POST /api/keys HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{`,
      );
      timers.push(setInterval(() => s.writable && s.write(' '), 1_000));
    }
    // 4. Streams nobody reads: the request is sent, the socket is never read (backpressure).
    for (let i = 0; i < readers; i++) {
      const s = await open(port, closed.readers, t0);
      sockets.push(s);
      const payload = JSON.stringify({
        messages: [{ role: 'user', content: 'x' }],
        max_tokens: 3000,
        stream: true,
      });
      s.write(
        `POST /api/d/${id}/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key.value}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
      );
      s.pause();
      s.removeAllListeners('data');
    }
    // 5. 10 MB bodies, with and without a key.
    const big = Buffer.alloc(10 * 1024 * 1024, 0x20);
    const bigOutcomes = new Tally();
    const bigMs: number[] = [];
    const bigBody = async (auth: boolean) => {
      const b0 = performance.now();
      try {
        const r = await fetch(`${api.url}/api/keys`, {
          method: 'POST',
          headers: { ...(auth ? bearer(compute) : {}), 'content-type': 'application/json' },
          body: big,
        });
        await r.arrayBuffer();
        bigOutcomes.add(`${auth ? 'with key' : 'no key'}: ${r.status}`);
      } catch (err) {
        bigOutcomes.add(`${auth ? 'with key' : 'no key'}: ${(err as Error).message}`);
      }
      bigMs.push(performance.now() - b0);
    };
    await Promise.all([bigBody(true), bigBody(false), bigBody(true), bigBody(false)]);

    let rssMax = rssBefore;
    let fdsMax = fdsBefore;
    const sampler = setInterval(() => {
      rssMax = Math.max(rssMax, rssMb(pid));
      fdsMax = Math.max(fdsMax, fds(pid));
    }, 500);
    const during: number[] = [];
    const duringOutcomes = new Tally();
    await good(during, duringOutcomes, () => Date.now() - t0 > abuseMs);
    clearInterval(sampler);
    for (const t of timers) clearInterval(t);
    const openAtEnd = (list: number[], total: number) => `${total - list.length} of ${total} still open`;
    const closedWhen = (list: number[]) => (list.length ? quantiles(list) : 'none closed');
    const limitMb = knob('RSS_LIMIT_MB', 300);
    const passed =
      duringOutcomes.total === duringOutcomes.get(200) &&
      rssMax - rssBefore < limitMb &&
      bigOutcomes.total ===
        bigOutcomes.get('with key: 413') + bigOutcomes.get('no key: 413') + bigOutcomes.get('no key: 401');
    const text = report(
      {
        suite: 'Slow and abusive clients',
        setup: `One API process (local mode, engine simulator), for ${abuseMs / 1000} s at once: ${idle} idle connections, ${loris} slowloris requests (a header line every 5 s), ${drip} slow bodies (1 byte/s of a declared 1 MB, no key), ${readers} streams of 3,000 tokens never read, four 10 MB bodies; a well-behaved client calling a dedicated endpoint back to back throughout (and for 10 s before, the baseline).`,
        rows: [
          ['well-behaved calls before (baseline)', `${baselineOutcomes}; ${quantiles(baseline)}`],
          ['well-behaved calls during the abuse', `${duringOutcomes}; ${quantiles(during)}`],
          [
            'API RSS before / max during (growth)',
            `${rssBefore.toFixed(0)} / ${rssMax.toFixed(0)} MB (+${(rssMax - rssBefore).toFixed(0)} MB)`,
          ],
          ['API open file descriptors before / max during', `${fdsBefore} / ${fdsMax}`],
          ['10 MB bodies', `${bigOutcomes}; ${quantiles(bigMs)}`],
          [
            'idle connections closed by the server (time after opening)',
            `${closedWhen(closed.idle)}; ${openAtEnd(closed.idle, idle)}`,
          ],
          ['slowloris closed', `${closedWhen(closed.loris)}; ${openAtEnd(closed.loris, loris)}`],
          ['slow bodies closed', `${closedWhen(closed.drip)}; ${openAtEnd(closed.drip, drip)}`],
          [
            'never-read streams closed',
            `${closedWhen(closed.readers)}; ${openAtEnd(closed.readers, readers)}`,
          ],
        ],
        passed,
      },
      startedAt,
    );
    return { text, passed };
  } finally {
    for (const s of sockets) s.destroy();
    await api.stop();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
