// `npm run bench wake`: what a wake costs, stage by stage, and Berth's own share of it.
//
// 1. Scenarios (local mode, `npm start`'s entry point in its own process): the engine simulator
//    models a vLLM start's stages at SCALE of the GPU figures of docs/wake.md — the weights
//    downloaded when the node's Hugging Face cache lacks them, torch.compile (cold, or from vLLM's
//    compile cache on the node), loading — and one endpoint wakes on a cold node (both caches
//    emptied while it slept), a warm node (weights kept, compile cache emptied), a warm node with its
//    compile cache, and five replicas start together on one cold node (one download from a counting
//    hub). Each wake's stages are its receipt (GET /api/endpoints/{id} → wake).
// 2. Berth's own share over BENCH_WAKE_N wakes (local mode, then on the real control plane with
//    kwok GPU nodes when KUBECONFIG reaches one, ./wake-cluster.ts): wake signal → replica count
//    written, and engine Ready → first byte of the held call's answer; calls lost; calls forwarded
//    before the engine was Ready (PROXY_RETRIES=0, so one would reach the client as an error).
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { freePort } from '@berth/operator/local';
import { ADMIN_TOKEN } from '../support/api.ts';
import { startFakeHub } from '../support/fake-hub.ts';
import { createTestDatabase } from '../support/postgres.ts';
import { machine } from './stats.ts';
import { benchWakeCluster } from './wake-cluster.ts';
import {
  accountOn,
  create,
  cycle,
  endpoint,
  f0,
  ENDPOINTS,
  IDLE_S,
  poll,
  s1,
  shareRows,
  sleep,
  span,
  wakeOnce,
  type Keys,
} from './wake-cycle.ts';

/** The simulated stages run at this fraction of their GPU durations (docs/wake.md). */
const SCALE = Number(process.env.BENCH_WAKE_SCALE ?? 0.1);
const REPEATS = Number(process.env.BENCH_WAKE_REPEATS ?? 3);

/** A 7B model in bf16 (15 GiB) on one H100, seconds (docs/wake.md; the download is an assumption). */
const GPU = { download: 16, compileCold: 53.85, compileCached: 11.75, load: 7.35 };
const ms = (s: number) => Math.round(s * 1000 * SCALE);
const ENGINE_ARGS = `--ttft-ms 0 --itl-ms 0 --weights-download-ms ${ms(GPU.download)} --compile-ms ${ms(GPU.compileCold)} --compile-cached-ms ${ms(GPU.compileCached)} --startup-delay-ms ${ms(GPU.load)}`;

/** Empties what a node keeps for a model: its weights (HF cache) and/or vLLM's compile cache. */
function forget(dirs: { hf: string; vllm: string }, what: { weights: boolean; compile: boolean }) {
  if (what.weights) rmSync(path.join(dirs.hf, 'hub'), { recursive: true, force: true });
  if (what.compile) rmSync(path.join(dirs.vllm, 'torch_compile_cache'), { recursive: true, force: true });
}

/** `npm start`'s entry point in its own process, as a local-mode user runs it (LOG_LEVEL=warn). */
async function withApi<T>(env: Record<string, string>, run: (url: string, keys: Keys) => Promise<T>) {
  const db = await createTestDatabase('bench_wake');
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'berth-bench-wake-'));
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', 'apps/api/src/main.ts'], {
    cwd: root,
    env: {
      ...process.env,
      KUBECONFIG: '',
      HOST: '127.0.0.1',
      PORT: String(port),
      DATABASE_URL: db.url,
      ADMIN_TOKEN,
      BERTH_RUNTIME: 'local',
      BERTH_DATA_DIR: dataDir,
      LOG_LEVEL: 'warn',
      PROXY_RETRIES: '0',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    await poll('Berth listening', 120_000, 200, async () =>
      (await fetch(`${url}/healthz`)).ok ? true : undefined,
    );
    return await run(url, await accountOn(url));
  } finally {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await exited;
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

const SCENARIOS = [
  { name: 'cold node', weights: true, compile: true },
  { name: 'warm node', weights: false, compile: true },
  { name: 'warm node + compile cache', weights: false, compile: false },
] as const;

/** The simulator's modelled start in a scenario (ms): what its engine stage should be, process start aside. */
const modelled = (sc: { weights: boolean; compile: boolean }) =>
  (sc.weights ? ms(GPU.download) : 0) +
  (sc.compile ? ms(GPU.compileCold) : ms(GPU.compileCached)) +
  ms(GPU.load);

async function scenarios(): Promise<string[]> {
  const hub = await startFakeHub({ 'org/small': {}, 'org/five': {} });
  const dirs = {
    hf: mkdtempSync(path.join(os.tmpdir(), 'berth-bench-hf-')),
    vllm: mkdtempSync(path.join(os.tmpdir(), 'berth-bench-vllm-')),
  };
  const env = {
    HF_ENDPOINT: hub.url,
    HF_HOME: dirs.hf,
    VLLM_CACHE_ROOT: dirs.vllm,
    BERTH_LOCAL_ENGINE_ARGS: ENGINE_ARGS,
  };
  const rows: string[] = [];
  let five_: { ready: number[]; downloads: number } | undefined;
  try {
    await withApi(env, async (url, keys) => {
      const hardware = { gpuType: 'nvidia-l4-24gb', gpuCount: 1 };
      const id = await create(url, keys, {
        model: 'org/small',
        hardware,
        scaling: { idleTimeoutSeconds: IDLE_S },
      });
      await poll('up', 120_000, 100, async () =>
        (await endpoint(url, keys, id)).status === 'up' ? true : undefined,
      );
      let since = Date.now();
      for (const sc of SCENARIOS)
        for (let i = 0; i < REPEATS; i++) {
          await sleep(Math.max(0, since + IDLE_S * 1000 - Date.now()));
          await poll('hibernated', 60_000, 100, async () =>
            (await endpoint(url, keys, id)).status === 'hibernated' ? true : undefined,
          );
          forget(dirs, sc);
          const s = await wakeOnce(url, keys, id, 0);
          since = Date.now();
          const r = s.receipt;
          const stage = [
            span(r.requestedAt, r.scaledAt),
            span(r.scaledAt, r.imageReadyAt),
            span(r.imageReadyAt, r.engineReadyAt),
            span(r.engineReadyAt, r.firstByteAt),
            span(r.requestedAt, r.firstByteAt),
          ];
          rows.push(
            `| ${sc.name} | ${i + 1} | ${f0(stage[0]!)} | ${f0(stage[1]!)} | ${f0(stage[2]!)} (${modelled(sc)}) | ${f0(stage[3]!)} | ${f0(stage[4]!)} | ${s1(stage[2]! / SCALE)} | ${r.placement ?? '–'} | ${s.ok ? 'yes' : '**no**'} |`,
          );
        }
      // Five replicas starting together on one cold node (a build: a wake starts one replica).
      forget(dirs, { weights: true, compile: true });
      const t0 = Date.now();
      const five = await create(url, keys, {
        model: 'org/five',
        hardware,
        scaling: { minReplicas: 5, maxReplicas: 5 },
      });
      const ready: number[] = [];
      await poll('5 ready', 180_000, 50, async () => {
        const n = (await endpoint(url, keys, five)).readyReplicas;
        while (ready.length < n) ready.push(Date.now() - t0);
        return n >= 5 ? true : undefined;
      });
      five_ = { ready, downloads: hub.downloads('org/five') };
    });
  } finally {
    await hub.close();
    rmSync(dirs.hf, { recursive: true, force: true });
    rmSync(dirs.vllm, { recursive: true, force: true });
  }
  return [
    `Milliseconds. The engine simulator's stages at ${SCALE} of the GPU figures: download ${ms(GPU.download)} (when the node lacks the weights), torch.compile ${ms(GPU.compileCold)} cold / ${ms(GPU.compileCached)} from the cache, loading ${ms(GPU.load)}; the engine stage adds the simulator's own process start. One endpoint on this machine (local mode: one node), woken ${REPEATS} times per scenario; the node is made cold by emptying its caches while the endpoint sleeps (so the receipt's placement, which names the node, says warm throughout).`,
    '',
    '| scenario | # | **Berth**: signal → scaled | scaled → engine running | engine: running → Ready (modelled) | **Berth**: Ready → first byte | total: signal → first byte | engine stage on GPUs, s (÷ scale) | placement | answered |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ...rows,
    '',
    `Five replicas of another model created together on the cold node (a wake starts one replica; a build of five is how five start together): each Ready ${five_!.ready.map(f0).join(', ')} ms after the create (${s1(five_!.ready[4]! / SCALE)} s on GPUs); **${five_!.downloads} download** of the weights from the hub, the other four replicas waiting for it.`,
  ];
}

async function localShare(): Promise<{ md: string[]; signalP99: number; firstP99: number }> {
  return withApi(
    { BERTH_LOCAL_ENGINE_ARGS: '--ttft-ms 0 --itl-ms 0 --startup-delay-ms 300' },
    async (url, keys) => {
      const hardware = { gpuType: 'nvidia-l4-24gb', gpuCount: 1 };
      const ids: string[] = [];
      for (let i = 0; i < ENDPOINTS; i++)
        ids.push(
          await create(url, keys, {
            model: 'org/small',
            hardware,
            scaling: { idleTimeoutSeconds: IDLE_S },
          }),
        );
      const { samples, failures } = await cycle(
        ids,
        (id, since) => wakeOnce(url, keys, id, since),
        async (id) => {
          await poll('up', 120_000, 200, async () =>
            (await endpoint(url, keys, id)).status === 'up' ? true : undefined,
          );
        },
      );
      const share = shareRows(samples, failures);
      return {
        md: [
          `${samples.length} wakes of ${ENDPOINTS} endpoints (local mode, \`npm start\`'s entry point, engine start 0.3 s, PROXY_RETRIES=0), staggered so that wakes rarely overlap.`,
          '',
          ...share.rows,
        ],
        ...share,
      };
    },
  );
}

export async function benchWake(): Promise<string> {
  const load = os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' / ');
  const started = new Date().toISOString().slice(0, 16).replace('T', ' ');
  const parts = (process.env.BENCH_WAKE_PARTS ?? 'scenarios,local,cluster').split(',');
  const md = [
    `## Wake (\`npm run bench wake\`, ${started} UTC, ${machine()}, load average at start ${load})`,
    '',
  ];
  // Each part's figures are printed as it ends (stderr), and a part that fails says so in its place.
  const part = async (name: string, title: string, run: () => Promise<string[]>) => {
    if (!parts.includes(name)) return;
    const lines = await run().catch((err: Error) => [`Failed: ${err.message}`]);
    md.push(`### ${title}`, '', ...lines, '');
    process.stderr.write(`${md.slice(-lines.length - 3).join('\n')}\n`);
  };
  await part('scenarios', 'A wake by stage', scenarios);
  await part('local', 'Berth’s own share, local mode', async () => (await localShare()).md);
  await part('cluster', 'Berth’s own share, on the real control plane', benchWakeCluster);
  return md.join('\n');
}
