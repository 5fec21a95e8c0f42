// The operator killed (SIGKILL) mid-reconcile, CHAOS_KILLS times (default 20), while endpoints are
// created, woken and terminated through the API, on the real control plane with kwok GPU nodes and
// engine simulators serving the pods. After the last kill the operator runs undisturbed.
// Guarantees: every endpoint converges (up or hibernated; terminated ones gone), and each endpoint
// has exactly one Deployment and one Service and at most one Secret and PVC, none of them orphaned.
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { AppsV1Api, CoreV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import { GROUP, LABEL_ENDPOINT, PLURAL, VERSION } from '@berth/crds';
import { deleteEndpoints, kubeconfigPath, loadKubeConfig, testNamespace } from '../cluster/env.ts';
import { bearer, startTestApi } from '../support/api.ts';
import { eventually } from '../support/eventually.ts';
import { startFakeHub } from '../support/fake-hub.ts';
import { installCrd } from '../support/operator.ts';
import { servePodEngines } from '../support/pod-engines.ts';
import { knob, report, sleep, Tally } from './lib.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function startOperatorProcess(env: Record<string, string>): { child: ChildProcess; output: () => string } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'operator/src/main.ts'], {
    cwd: root,
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  child.stderr!.on('data', (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  return { child, output: () => out };
}

export async function operatorKill(): Promise<{ text: string; passed: boolean }> {
  const startedAt = Date.now();
  const kills = knob('KILLS', 20);
  await installCrd();
  const ns = await testNamespace('chaos-opkill');
  const hub = await startFakeHub();
  const kc = loadKubeConfig();
  const engines = await servePodEngines(kc, ns.name);
  const operatorEnv = {
    KUBECONFIG: kubeconfigPath(),
    BERTH_NAMESPACE: ns.name,
    HF_ENDPOINT: hub.url,
    BERTH_LEADER_ELECTION: 'false',
    BERTH_ENGINE_IMAGE: 'berth/engine-sim:dev',
    BERTH_DRAIN_SECONDS: '1',
    BERTH_TERMINATION_GRACE_SECONDS: '5',
    BERTH_MODEL_CACHE: 'hostPath:/var/lib/berth/hf-cache',
    BERTH_METRICS_PORT: '0',
  };
  let operator = startOperatorProcess(operatorEnv);
  const api = await startTestApi({
    KUBECONFIG: kubeconfigPath(),
    BERTH_NAMESPACE: ns.name,
    WAKE_HOLD_TIMEOUT_MS: '90000',
  });
  const apps = kc.makeApiClient(AppsV1Api);
  const core = kc.makeApiClient(CoreV1Api);
  const custom = kc.makeApiClient(CustomObjectsApi);
  try {
    const acct = await api.newAccount();
    const h = { ...bearer(acct.global), 'content-type': 'application/json' };
    const live = new Set<string>();
    const terminated = new Set<string>();
    const actions = new Tally();
    const create = async () => {
      const r = await fetch(`${api.url}/api/endpoints`, {
        method: 'POST',
        headers: h,
        body: JSON.stringify({
          model: 'org/small',
          hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
          scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
        }),
      });
      actions.add(`create ${r.status}`);
      if (r.status === 201) live.add(((await r.json()) as { id: string }).id);
    };
    const pick = () => [...live][Math.floor(Math.random() * live.size)]!;

    for (let i = 0; i < kills; i++) {
      // One or two actions, then the kill lands somewhere in the reconciles they cause.
      for (let a = 0; a < 1 + Math.floor(Math.random() * 2); a++) {
        const roll = Math.random();
        if (live.size < 3 || (roll < 0.4 && live.size < 6)) await create();
        else if (roll < 0.75) {
          const id = pick();
          const r = await fetch(`${api.url}/api/endpoints/${id}/wake`, { method: 'POST', headers: h });
          actions.add(`wake ${r.status}`);
        } else {
          const id = pick();
          const r = await fetch(`${api.url}/api/endpoints/${id}`, { method: 'DELETE', headers: h });
          actions.add(`terminate ${r.status}`);
          live.delete(id);
          terminated.add(id);
        }
      }
      await sleep(Math.random() * 1_500);
      operator.child.kill('SIGKILL');
      await new Promise((r) => operator.child.once('exit', r));
      operator = startOperatorProcess(operatorEnv);
    }

    // Convergence: every live endpoint up or hibernated, every terminated one gone.
    const convergeStart = Date.now();
    let converged = true;
    const phaseOf = async (id: string) =>
      ((await (await fetch(`${api.url}/api/endpoints/${id}`, { headers: h })).json()) as { status?: string })
        .status;
    await eventually(
      async () => {
        for (const id of live) if (!['up', 'hibernated'].includes((await phaseOf(id)) ?? '')) return false;
        const crs = (await custom.listNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace: ns.name,
          plural: PLURAL,
        })) as { items: { metadata: { name: string } }[] };
        return crs.items.every((c) => live.has(c.metadata.name));
      },
      { timeout: 180_000, interval: 1_000 },
    ).catch(() => (converged = false));
    const convergeMs = Date.now() - convergeStart;
    const phases = new Tally();
    for (const id of live) phases.add((await phaseOf(id)) ?? 'missing');

    // Children: no duplicates, no orphans.
    const labelSelector = LABEL_ENDPOINT;
    const children: Record<string, { metadata?: { labels?: Record<string, string> } }[]> = {
      Deployment: (await apps.listNamespacedDeployment({ namespace: ns.name, labelSelector })).items,
      Service: (await core.listNamespacedService({ namespace: ns.name, labelSelector })).items,
      Secret: (await core.listNamespacedSecret({ namespace: ns.name, labelSelector })).items,
      PersistentVolumeClaim: (
        await core.listNamespacedPersistentVolumeClaim({ namespace: ns.name, labelSelector })
      ).items,
    };
    const problems: string[] = [];
    const counts: string[] = [];
    for (const [kind, items] of Object.entries(children)) {
      const per = new Map<string, number>();
      for (const it of items) {
        const owner = it.metadata?.labels?.[LABEL_ENDPOINT] ?? '?';
        per.set(owner, (per.get(owner) ?? 0) + 1);
        if (!live.has(owner)) problems.push(`orphaned ${kind} of ${owner}`);
      }
      for (const [owner, n] of per) if (n > 1) problems.push(`${n} ${kind}s for ${owner}`);
      if (kind === 'Deployment' || kind === 'Service')
        for (const id of live) if (!per.has(id)) problems.push(`no ${kind} for ${id}`);
      counts.push(`${kind}: ${items.length}`);
    }
    const passed = converged && problems.length === 0;
    const text = report(
      {
        suite: 'Operator killed mid-reconcile',
        setup: `The operator as its own process (\`operator/src/main.ts\`) on the local control plane (kwok GPU nodes, engine simulators serving the pods); ${kills} rounds of 1–2 API actions (create, wake, terminate; idle timeout 15 s) followed after 0–1.5 s by SIGKILL and an immediate restart. Then it runs undisturbed until everything converges.`,
        rows: [
          ['kills', kills],
          ['actions', actions.toString()],
          ['endpoints live / terminated', `${live.size} / ${terminated.size}`],
          [
            'converged (live up or hibernated, terminated gone)',
            converged ? `yes, ${(convergeMs / 1000).toFixed(1)} s after the last kill` : 'NO (3 min)',
          ],
          ['phases at the end', phases.toString()],
          ['children in the namespace', counts.join(', ')],
          ['duplicates / orphans / missing', problems.length ? problems.join('; ') : 'none'],
          ['engine simulators started (pods served)', engines.started],
        ],
        passed,
      },
      startedAt,
    );
    return { text, passed };
  } finally {
    // Terminate while the operator runs, so finalizers are released, then tear down.
    await deleteEndpoints(ns.name);
    operator.child.kill('SIGTERM');
    await api.stop();
    await engines.close();
    await hub.close();
    await ns.remove();
  }
}
