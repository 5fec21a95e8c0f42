// `npm run bench wake`, its part on the real control plane: the operator reconciling on kwok's H100
// nodes, an engine simulator serving each pod (test/support/pod-engines.ts), the API. By default the
// operator (`operator/src/main.ts`) and the API (`npm start`'s entry) run as processes of their own,
// as the chart runs them; BENCH_WAKE_PROCESSES=one runs both in this process, as the end-to-end
// suites do (they then share one event loop with the simulators and the client). Every endpoint's pods turn Ready 1 s after they run (kwok's
// stage), the engine's modelled start. Kubernetes writes a pod's Ready time to the second, so the
// engine's Ready moment here is when this process's own pod watch saw it (the API's watch sees the
// same event): Berth's share after it is the held call's first byte at the client, minus that.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { V1Pod } from '@kubernetes/client-node';
import { LABEL_ENDPOINT } from '@berth/crds';
import { kubeconfigPath, kubectl, loadKubeConfig, testNamespace } from '../cluster/env.ts';
import { patchEndpointSpec } from '../support/endpoint-spec.ts';
import { ADMIN_TOKEN, spawnApi, startTestApi } from '../support/api.ts';
import { createTestDatabase } from '../support/postgres.ts';
import { startFakeHub } from '../support/fake-hub.ts';
import { installCrd, start, testConfig } from '../support/operator.ts';
import { enginePodInformer, servePodEngines } from '../support/pod-engines.ts';
import {
  accountOn,
  create,
  cycle,
  directWake,
  ENDPOINTS,
  endpoint,
  poll,
  shareRows,
  wakeOnce,
  WAKES,
  IDLE_S,
} from './wake-cycle.ts';

/** When this process first saw each pod Ready (ms since the epoch), by endpoint. */
function readyWatch(namespace: string) {
  const informer = enginePodInformer(loadKubeConfig(), namespace);
  const seen = new Map<string, { pod: string; at: number }[]>();
  const onPod = (p: V1Pod) => {
    const id = p.metadata?.labels?.[LABEL_ENDPOINT];
    const ready = p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
    if (!id || !ready || !p.metadata?.name) return;
    const list = seen.get(id) ?? [];
    if (!list.some((x) => x.pod === p.metadata!.name)) list.push({ pod: p.metadata.name, at: Date.now() });
    seen.set(id, list);
  };
  informer.on('add', onPod);
  informer.on('update', onPod);
  return {
    start: () => informer.start(),
    stop: () => informer.stop(),
    /** The first Ready of the endpoint's pods seen at or after `after`. */
    readyAfter: (id: string, after: number) => seen.get(id)?.find((x) => x.at >= after)?.at,
  };
}

const root = fileURLToPath(new URL('../..', import.meta.url));

/** The operator as the chart runs it: its own process, configured by its environment. */
/** The benchmark operator's environment: one namespace, the fake hub, the engine simulator's image. */
export function operatorEnv(
  namespace: string,
  hubUrl: string,
  direct: Awaited<ReturnType<typeof directWake>>,
  more: Record<string, string> = {},
): Record<string, string> {
  return {
    KUBECONFIG: kubeconfigPath(),
    BERTH_NAMESPACE: namespace,
    HF_ENDPOINT: hubUrl,
    BERTH_ENGINE_IMAGE: 'berth/engine-sim:dev',
    BERTH_LEADER_ELECTION: 'false',
    BERTH_METRICS_PORT: String(direct.port),
    ...(direct.on ? { BERTH_WAKE_TOKEN: direct.token } : {}),
    // Hibernation's drain and grace only (kwok deletes at once): not on the wake's path.
    BERTH_DRAIN_SECONDS: '1',
    BERTH_TERMINATION_GRACE_SECONDS: '5',
    ...more,
  };
}

export async function spawnOperator(env: Record<string, string>): Promise<{ stop: () => Promise<void> }> {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'operator/src/main.ts'], {
    cwd: root,
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  await new Promise((r) => setTimeout(r, 3_000));
  if (child.exitCode !== null) throw new Error(`the operator exited with ${child.exitCode}`);
  return {
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

export async function benchWakeCluster(): Promise<string[]> {
  if ((await kubectl(['get', 'nodes'], { timeoutMs: 10_000 }).catch(() => ({ code: 1 }))).code !== 0)
    return ['Skipped: no Kubernetes control plane (`npm run -s cluster:up`, then KUBECONFIG).'];
  const separate = (process.env.BENCH_WAKE_PROCESSES ?? 'separate') !== 'one';
  await installCrd();
  const ns = await testNamespace('bench-wake');
  const hub = await startFakeHub();
  const direct = await directWake();
  const apiEnv = {
    KUBECONFIG: kubeconfigPath(),
    BERTH_NAMESPACE: ns.name,
    PROXY_RETRIES: '0',
    WAKE_HOLD_TIMEOUT_MS: '90000',
    ...direct.apiEnv,
  };
  const op = separate
    ? await spawnOperator(operatorEnv(ns.name, hub.url, direct))
    : await start(
        testConfig(ns.name, hub.url, {
          leaderElection: false,
          metricsPort: direct.port,
          ...(direct.on ? { wakeToken: direct.token } : {}),
        }),
      );
  const engines = await servePodEngines(loadKubeConfig(), ns.name, { ttftMs: 0, itlMs: 0, outputTokens: 4 });
  const api = separate
    ? await spawnApi({
        ...apiEnv,
        DATABASE_URL: (await createTestDatabase('bench_wake')).url,
        ADMIN_TOKEN,
        LOG_LEVEL: 'info',
      })
    : await startTestApi(apiEnv);
  const watch = readyWatch(ns.name);
  await watch.start();
  try {
    const keys = await accountOn(api.url);
    const ids: string[] = [];
    for (let i = 0; i < ENDPOINTS; i++) {
      const id = await create(api.url, keys, {
        model: 'org/small',
        hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
        scaling: { idleTimeoutSeconds: IDLE_S },
      });
      await patchEndpointSpec(ns.name, id, {
        engine: { podAnnotations: { 'sim.berth.dev/ready-after': '1s' } },
      });
      ids.push(id);
    }
    const { samples, failures } = await cycle(
      ids,
      async (id, since) => {
        const s = await wakeOnce(api.url, keys, id, since);
        const ready = watch.readyAfter(id, s.sentAt);
        // The receipt's engine Ready is whole seconds here: the watch's moment replaces it.
        return ready ? { ...s, receipt: { ...s.receipt, engineReadyAt: new Date(ready).toISOString() } } : s;
      },
      async (id) => {
        await poll('up', 180_000, 250, async () =>
          (await endpoint(api.url, keys, id)).status === 'up' ? true : undefined,
        );
      },
    );
    const warm = samples.filter((s) => s.receipt.placement === 'warm').length;
    return [
      `${samples.length} wakes of ${ENDPOINTS} endpoints (of ${WAKES} asked) on kwok's H100 nodes, the pod Ready 1 s after it runs; ${separate ? 'the operator and the API each in a process of its own (as the chart runs them), the engine simulators and this client in a third' : 'API, operator, engine simulators and this client in one Node process'}; PROXY_RETRIES=0; ${direct.on ? 'the API tells the operator of each wake directly (POST /wake, as the chart sets it up) besides the annotation' : 'the wake annotation alone (BENCH_WAKE_DIRECT=false)'}. "Engine Ready" is when this process's pod watch saw the pod Ready. Placement: ${warm} of ${samples.length} warm (woken on the node they ran on).`,
      '',
      ...shareRows(samples, failures).rows,
    ];
  } finally {
    await watch.stop();
    await kubectl(['delete', 'dedicatedendpoints', '--all', '-n', ns.name, '--wait=true', '--timeout=120s']);
    await api.stop();
    await engines.close();
    await op.stop();
    await hub.close();
    await ns.remove();
  }
}
