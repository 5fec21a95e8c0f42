// `npm run bench wake`'s measuring: one wake of an endpoint through the API as a caller lives it
// (a held streaming call, then the wake's receipt), many of them one at a time over several
// endpoints, and Berth's own share of them. Used by ./wake.ts (local mode) and ./wake-cluster.ts.
import { createServer, type AddressInfo } from 'node:net';
import { ADMIN_TOKEN } from '../support/api.ts';
import { percentile } from './stats.ts';

const num = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
export const WAKES = num('BENCH_WAKE_N', 100);
export const ENDPOINTS = num('BENCH_WAKE_ENDPOINTS', 10);
/** Every endpoint sleeps after this long without traffic (the schema's minimum). */
export const IDLE_S = 15;

export interface Receipt {
  requestedAt: string;
  scaledAt: string;
  scheduledAt: string;
  imageReadyAt: string;
  engineReadyAt: string;
  firstByteAt: string;
  node: string | null;
  placement: string | null;
}

export interface Keys {
  compute: Record<string, string>;
  inference: Record<string, string>;
}

export async function accountOn(url: string): Promise<Keys> {
  const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };
  const res = await fetch(`${url}/admin/accounts`, {
    method: 'POST',
    headers: admin,
    body: JSON.stringify({ name: 'bench-wake' }),
  });
  const { account, key } = (await res.json()) as { account: { id: string }; key: { value: string } };
  const compute = (await (
    await fetch(`${url}/admin/accounts/${account.id}/keys`, {
      method: 'POST',
      headers: admin,
      body: JSON.stringify({ name: 'bench-compute', scope: 'compute' }),
    })
  ).json()) as { value: string };
  const bearer = (k: string) => ({ authorization: `Bearer ${k}`, 'content-type': 'application/json' });
  return { compute: bearer(compute.value), inference: bearer(key.value) };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `fn` every `everyMs` until it returns something; throws after `timeoutMs`. */
export async function poll<T>(
  what: string,
  timeoutMs: number,
  everyMs: number,
  fn: () => Promise<T | undefined>,
) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(everyMs);
  }
}

export const endpoint = async (url: string, keys: Keys, id: string) =>
  (await (await fetch(`${url}/api/endpoints/${id}`, { headers: keys.compute })).json()) as {
    status: string;
    replicas: number;
    readyReplicas: number;
    wake: (Receipt & { inProgress: boolean }) | null;
  };

export async function create(url: string, keys: Keys, body: Record<string, unknown>): Promise<string> {
  const res = await fetch(`${url}/api/endpoints`, {
    method: 'POST',
    headers: keys.compute,
    body: JSON.stringify(body),
  });
  if (res.status !== 201) throw new Error(`create: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { id: string }).id;
}

export interface WakeSample {
  ok: boolean;
  /** The answer, when it was not a complete stream. */
  answer?: string;
  /** Client clock (this machine's), ms since the epoch: the call sent, its first `data:` byte. */
  sentAt: number;
  firstDataAt: number;
  receipt: Receipt;
}

/**
 * One wake: waits for the endpoint to sleep (polling slowly until it should have), sends one held
 * streaming call, reads it whole, and waits for the wake's receipt to reach the first byte.
 */
export async function wakeOnce(url: string, keys: Keys, id: string, sleptSince: number): Promise<WakeSample> {
  await sleep(Math.max(0, sleptSince + IDLE_S * 1000 - Date.now()));
  // Asleep, and its replica gone: a call while the last one drains would be answered by it, no wake.
  await poll(`${id} hibernated`, 60_000, 100, async () => {
    const e = await endpoint(url, keys, id);
    return e.status === 'hibernated' && e.replicas === 0 ? true : undefined;
  });
  const sentAt = Date.now();
  const res = await fetch(`${url}/api/d/${id}/chat/completions`, {
    method: 'POST',
    headers: keys.inference,
    body: JSON.stringify({ messages: [{ role: 'user', content: 'wake' }], max_tokens: 4, stream: true }),
  });
  let text = '';
  let firstDataAt = 0;
  for await (const chunk of res.body!.pipeThrough(new TextDecoderStream())) {
    text += chunk;
    if (!firstDataAt && (text.startsWith('data: ') || text.includes('\ndata: '))) firstDataAt = Date.now();
  }
  if (res.headers.get('x-berth-cold-start') !== 'true')
    throw new Error(`${id}: the call was not held (no wake)`);
  const ok = res.status === 200 && text.endsWith('data: [DONE]\n\n') && !text.includes('"error"');
  const receipt = await poll(`${id} receipt`, 30_000, 100, async () => {
    const w = (await endpoint(url, keys, id)).wake;
    return w && !w.inProgress && w.firstByteAt && Date.parse(w.firstByteAt) >= sentAt ? w : undefined;
  }).catch(async (err: Error) => {
    throw new Error(`${err.message}: ${JSON.stringify((await endpoint(url, keys, id)).wake)}`);
  });
  return { ok, ...(ok ? {} : { answer: `${res.status} ${text.slice(-300)}` }), sentAt, firstDataAt, receipt };
}

export const span = (a: string | number, b: string | number) =>
  (typeof b === 'number' ? b : Date.parse(b)) - (typeof a === 'number' ? a : Date.parse(a));
export const f0 = (v: number) => v.toFixed(0);
/** Milliseconds as seconds. */
export const s1 = (v: number) => (v / 1000).toFixed(2);

/** Berth's share over the samples, as table rows. */
export function shareRows(
  samples: WakeSample[],
  failures: string[] = [],
): { rows: string[]; signalP99: number; firstP99: number } {
  const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
  const signal = sorted(samples.map((s) => span(s.receipt.requestedAt, s.receipt.scaledAt)));
  const first = sorted(samples.map((s) => span(s.receipt.engineReadyAt, s.receipt.firstByteAt)));
  const client = sorted(samples.map((s) => span(s.receipt.engineReadyAt, s.firstDataAt)));
  const lost = samples.filter((s) => !s.ok).length;
  // With PROXY_RETRIES=0 a call forwarded to an engine not yet serving fails: the engine's 503
  // ("The model is still loading") or a refused connection reaches the client.
  const early = samples.filter((s) =>
    /still loading|communicate with inference engine/.test(s.answer ?? ''),
  ).length;
  const line = (name: string, xs: number[], target: string) =>
    `| ${name} | ${f0(percentile(xs, 50))} | ${f0(percentile(xs, 99))} | ${f0(xs.at(-1)!)} | ${target} |`;
  return {
    rows: [
      '| Berth’s share, ms | p50 | p99 | max | target (p99) |',
      '| --- | --- | --- | --- | --- |',
      line('wake signal → replica count written (receipt)', signal, '≤ 100'),
      line('engine Ready → first byte forwarded (receipt)', first, '≤ 250'),
      line('engine Ready → first byte at the client', client, ''),
      `| wakes / calls lost / forwarded before Ready | ${samples.length} | ${lost} | ${early} | 0 lost, 0 early |`,
      ...(failures.length
        ? ['', `Wakes not measured (${failures.length}): ${[...new Set(failures)].slice(0, 3).join('; ')}`]
        : []),
    ],
    signalP99: percentile(signal, 99),
    firstP99: percentile(first, 99),
  };
}

/**
 * Runs WAKES wakes over the endpoints: each endpoint's loop starts a fraction of a cycle after the
 * previous one's, so the wakes come one at a time.
 */
export async function cycle(
  ids: string[],
  wake: (id: string, since: number) => Promise<WakeSample>,
  up: (id: string) => Promise<void>,
): Promise<{ samples: WakeSample[]; failures: string[] }> {
  const samples: WakeSample[] = [];
  const failures: string[] = [];
  const per = Math.ceil(WAKES / ids.length);
  for (const id of ids) await up(id);
  const start = Date.now();
  await Promise.all(
    ids.map(async (id, i) => {
      await sleep(((IDLE_S * 1000 + 2000) / ids.length) * i);
      let since = i === 0 ? start - IDLE_S * 1000 : Date.now() - IDLE_S * 1000;
      for (let n = 0; n < per && samples.length + failures.length < WAKES; n++) {
        try {
          const s = await wake(id, since);
          samples.push(s);
          since = s.firstDataAt || Date.now();
        } catch (err) {
          failures.push((err as Error).message);
          since = Date.now();
        }
      }
    }),
  );
  return { samples, failures };
}

/** A port nothing listens on now (the operator's metrics port, which the API must know). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/**
 * The chart's default: the API tells the operator of a wake directly (POST /wake) besides the
 * annotation. BENCH_WAKE_DIRECT=false measures the annotation alone.
 */
export async function directWake(): Promise<
  | { on: true; port: number; token: string; apiEnv: Record<string, string> }
  | { on: false; port: 0; apiEnv: Record<string, string> }
> {
  if (process.env.BENCH_WAKE_DIRECT === 'false') return { on: false, port: 0, apiEnv: {} };
  const port = await freePort();
  const token = 'bench-wake-token-0123456789';
  return {
    on: true,
    port,
    token,
    apiEnv: { BERTH_OPERATOR_URL: `http://127.0.0.1:${port}`, BERTH_WAKE_TOKEN: token },
  };
}
