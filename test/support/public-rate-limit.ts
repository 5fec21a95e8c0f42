// A Public endpoint's rate limits across two API replicas that share Redis (REDIS_URL): Kubernetes
// mode on the local control plane, replica A in this process and B its own process (`npm start`'s
// entry point) on one database and one cluster, the operator in-process and engine simulators
// serving the pods. Keyless calls are sent alternately to A and B, from several client addresses
// (X-Forwarded-For, with TRUST_PROXY), so each window's limits are only right if both replicas count
// together. Shared by `npm run chaos -- public-rate-limit` (whole minutes) and
// test/e2e/public-rate-limit.int.test.ts (one short burst).
import { randomBytes } from 'node:crypto';
import { deleteEndpoints, kubeconfigPath, loadKubeConfig, testNamespace } from '../cluster/env.ts';
import { ADMIN_TOKEN, bearer, spawnApi, startTestApi } from './api.ts';
import { eventually } from './eventually.ts';
import { startFakeHub } from './fake-hub.ts';
import { installCrd, start, testConfig } from './operator.ts';
import { servePodEngines } from './pod-engines.ts';

export interface RateLimitRun {
  perEndpoint: number;
  perClient: number;
  /** Windows (wall-clock minutes) to load; 0: one burst in the current window, if 15 s of it remain. */
  windows: number;
  /** Crowd clients (each its own address), besides the one heavy client. */
  crowd: number;
  /** Pause between one client's calls (ms). */
  pauseMs: number;
  /** Calls each crowd client sends in a burst (windows = 0). */
  burstCalls: number;
  /** Redis the replicas share (default TEST_REDIS_URL, else 127.0.0.1:6379); null: none (each counts alone). */
  redisUrl?: string | null;
  log?: (line: string) => void;
}

export interface WindowFigures {
  /** The window's start (ISO). */
  window: string;
  sent: number;
  /** 200s, all clients. */
  admitted: number;
  /** 200s answered by A / by B. */
  admittedBy: [number, number];
  /** The heavy client's 200s (it sends 3× its limit first). */
  heavyAdmitted: number;
  /** The most 200s one crowd client got. */
  crowdMaxAdmitted: number;
  refused: number;
  /** Answers other than 200 and 429, or a 429 without Retry-After or the documented body. */
  other: string[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Whether the figures of each window are what the limits say: together, not per replica. */
export const limitsHeld = (o: RateLimitRun, ws: WindowFigures[]) =>
  ws.length > 0 &&
  ws.every(
    (w) =>
      w.admitted === o.perEndpoint &&
      w.heavyAdmitted === o.perClient &&
      w.crowdMaxAdmitted <= o.perClient &&
      w.other.length === 0 &&
      w.admittedBy[0] > 0 &&
      w.admittedBy[1] > 0,
  );

export async function publicLimitAcrossReplicas(o: RateLimitRun): Promise<WindowFigures[]> {
  const log = o.log ?? (() => {});
  const redis =
    o.redisUrl === null ? undefined : (o.redisUrl ?? process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379');
  await installCrd();
  const ns = await testNamespace('chaos-rl');
  const hub = await startFakeHub();
  const engines = await servePodEngines(loadKubeConfig(), ns.name);
  const op = await start(testConfig(ns.name, hub.url, { leaderElection: false }));
  const env = {
    KUBECONFIG: kubeconfigPath(),
    BERTH_NAMESPACE: ns.name,
    ...(redis ? { REDIS_URL: redis } : {}),
    TRUST_PROXY: 'true',
    PUBLIC_RATE_LIMIT_PER_ENDPOINT: String(o.perEndpoint),
    PUBLIC_RATE_LIMIT_PER_CLIENT: String(o.perClient),
  };
  const a = await startTestApi(env);
  const b = await spawnApi({ ...env, DATABASE_URL: a.db.url, ADMIN_TOKEN });
  const replicas = [a.url, b.url];
  try {
    const acct = await a.newAccount();
    const created = await fetch(`${a.url}/api/endpoints`, {
      method: 'POST',
      headers: { ...bearer(acct.global), 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'org/small',
        authMode: 'Public',
        hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
        scaling: { minReplicas: 1, maxReplicas: 1 },
      }),
    });
    const { id } = (await created.json()) as { id: string };
    if (created.status !== 201) throw new Error(`endpoint: ${created.status}`);
    for (const url of replicas)
      await eventually(
        async () =>
          (
            (await (await fetch(`${url}/api/endpoints/${id}`, { headers: bearer(acct.global) })).json()) as {
              status: string;
            }
          ).status === 'up',
        { timeout: 120_000, interval: 500, description: `up on ${url}` },
      );
    log(`endpoint ${id} up on both replicas`);

    // Every call from a fresh run of addresses, so nothing counted before touches the windows.
    const prefix = `10.${randomBytes(1)[0]}.${randomBytes(1)[0]}`;
    let seq = 0;
    const call = async (client: string, w: WindowFigures, counts: Map<string, number>) => {
      const r = seq++ % 2;
      w.sent++;
      try {
        const res = await fetch(`${replicas[r]}/api/d/${id}/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-forwarded-for': client },
          body: JSON.stringify({
            model: 'org/small',
            messages: [{ role: 'user', content: 'hi' }],
            max_tokens: 2,
          }),
        });
        const body = await res.text();
        if (res.status === 200) {
          w.admitted++;
          w.admittedBy[r]!++;
          counts.set(client, (counts.get(client) ?? 0) + 1);
        } else if (
          res.status === 429 &&
          /^\d+$/.test(res.headers.get('retry-after') ?? '') &&
          body.includes('"code":"rate_limited"')
        )
          w.refused++;
        else w.other.push(`${'AB'[r]} ${res.status}: ${body.slice(0, 120)}`);
      } catch (err) {
        w.other.push(`${'AB'[r]} ${(err as Error).message}`);
      }
    };

    const figures: WindowFigures[] = [];
    const windowCount = Math.max(1, o.windows);
    for (let i = 0; i < windowCount; i++) {
      let start: number;
      let end: number;
      if (o.windows === 0) {
        // A burst inside the current window, or the next one if less than 15 s of it remain.
        if (60_000 - (Date.now() % 60_000) < 15_000) await sleep(60_000 - (Date.now() % 60_000) + 500);
        start = Date.now() - (Date.now() % 60_000);
        end = start + 57_000;
      } else {
        // Whole windows: from 1 s after a minute starts to 3 s before it ends.
        await sleep(60_000 - (Date.now() % 60_000) + 1_000);
        start = Date.now() - (Date.now() % 60_000);
        end = start + 57_000;
      }
      const w: WindowFigures = {
        window: new Date(start).toISOString(),
        sent: 0,
        admitted: 0,
        admittedBy: [0, 0],
        heavyAdmitted: 0,
        crowdMaxAdmitted: 0,
        refused: 0,
        other: [],
      };
      const counts = new Map<string, number>();
      const heavy = `${prefix}.${200 + i}`;
      // The heavy client first: 3× its limit, as fast as it can, alternating replicas.
      for (let k = 0; k < 3 * o.perClient; k++) await call(heavy, w, counts);
      await Promise.all(
        Array.from({ length: o.crowd }, async (_, c) => {
          const client = `${prefix}.${c + 1}`;
          for (let k = 0; o.windows === 0 ? k < o.burstCalls : Date.now() < end; k++) {
            await call(client, w, counts);
            await sleep(o.pauseMs);
          }
        }),
      );
      if (Date.now() >= start + 60_000) w.other.push('the burst ran past its window');
      w.heavyAdmitted = counts.get(heavy) ?? 0;
      w.crowdMaxAdmitted = Math.max(0, ...[...counts].filter(([k]) => k !== heavy).map(([, v]) => v));
      figures.push(w);
      log(
        `window ${w.window}: sent ${w.sent}, admitted ${w.admitted} (A ${w.admittedBy[0]}, B ${w.admittedBy[1]})`,
      );
    }
    return figures;
  } finally {
    await deleteEndpoints(ns.name);
    await b.stop();
    await a.stop();
    await engines.close();
    await op.stop();
    await hub.close();
    await ns.remove();
  }
}
