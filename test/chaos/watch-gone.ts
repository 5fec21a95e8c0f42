// The API's Kubernetes watches dropped, and a `410 Gone` forcing a relist when they come back,
// CHAOS_WATCH_CYCLES times (default 4). The API reaches the API server through a proxy that breaks
// its watches (the operator's are direct). Each cycle: the endpoint hibernates; the watches are
// dropped and refused; a request arrives (its wake is written through the still-working API calls)
// and is held while the operator wakes the endpoint, unseen by the API; after CHAOS_BLIND_MS
// (default 5 s) watches are allowed again but expire at once (410), so the API must relist.
// Guarantees: every held request answered, one wake per sleep, and the API's view of the endpoint
// equals the cluster's after each relist (no missed transition).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { GROUP, PLURAL, VERSION, type DedicatedEndpoint } from '@berth/crds';
import { deleteEndpoints, loadKubeConfig, testNamespace } from '../cluster/env.ts';
import { bearer, startTestApi } from '../support/api.ts';
import { eventually } from '../support/eventually.ts';
import { startFakeHub } from '../support/fake-hub.ts';
import { installCrd, start, testConfig } from '../support/operator.ts';
import { servePodEngines } from '../support/pod-engines.ts';
import { watchProxy } from '../support/watch-proxy.ts';
import { knob, quantiles, report, sleep, Tally, wakeRequests } from './lib.ts';

export async function watchGone(): Promise<{ text: string; passed: boolean }> {
  const startedAt = Date.now();
  const cycles = knob('WATCH_CYCLES', 4);
  const blindMs = knob('BLIND_MS', 5_000);
  await installCrd();
  const ns = await testNamespace('chaos-watch');
  const hub = await startFakeHub();
  const kc = loadKubeConfig();
  const engines = await servePodEngines(kc, ns.name);
  const op = await start(testConfig(ns.name, hub.url, { leaderElection: false }));
  const dir = mkdtempSync(path.join(tmpdir(), 'berth-chaos-watch-'));
  const proxy = await watchProxy(kc, path.join(dir, 'kubeconfig'));
  const api = await startTestApi({
    KUBECONFIG: proxy.kubeconfig,
    BERTH_NAMESPACE: ns.name,
    WAKE_HOLD_TIMEOUT_MS: '120000',
  });
  const custom = kc.makeApiClient(CustomObjectsApi);
  try {
    const acct = await api.newAccount();
    const h = { ...bearer(acct.global), 'content-type': 'application/json' };
    const created = await fetch(`${api.url}/api/endpoints`, {
      method: 'POST',
      headers: h,
      body: JSON.stringify({
        model: 'org/small',
        hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
        scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
      }),
    });
    const { id } = (await created.json()) as { id: string };
    const apiPhase = async () =>
      ((await (await fetch(`${api.url}/api/endpoints/${id}`, { headers: h })).json()) as { status: string })
        .status;
    const clusterPhase = async () =>
      (
        (await custom.getNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace: ns.name,
          plural: PLURAL,
          name: id,
        })) as DedicatedEndpoint
      ).status?.phase;
    await eventually(async () => (await apiPhase()) === 'up', { timeout: 120_000, description: 'up' });
    const client = new OpenAI({
      baseURL: `${api.url}/api/d/${id}`,
      apiKey: acct.inference,
      maxRetries: 0,
      timeout: 150_000,
    });

    const outcomes = new Tally();
    const heldMs: number[] = [];
    const catchUpMs: number[] = [];
    let sleeps = 0;
    let mismatches = 0;
    for (let c = 0; c < cycles; c++) {
      await eventually(
        async () => (await apiPhase()) === 'hibernated' && (await clusterPhase()) === 'hibernated',
        {
          timeout: 120_000,
          interval: 500,
          description: `cycle ${c}: hibernated`,
        },
      );
      sleeps++;
      proxy.blockWatches();
      const t0 = performance.now();
      const held = Promise.all(
        Array.from({ length: 3 }, (_, i) =>
          client.chat.completions
            .create({ model: id, messages: [{ role: 'user', content: `cycle ${c} ${i}` }], max_tokens: 4 })
            .then(
              (r) => outcomes.add(r.choices[0]?.message.content ? 'answered' : 'empty'),
              (err: Error) => outcomes.add(`failed: ${err.message.slice(0, 60)}`),
            )
            .finally(() => heldMs.push(performance.now() - t0)),
        ),
      );
      // The operator wakes it while the API cannot see (its watches are refused).
      await eventually(async () => (await clusterPhase()) === 'up', {
        timeout: 120_000,
        description: 'woken',
      });
      await sleep(blindMs);
      const t1 = performance.now();
      proxy.unblockWatches(true);
      await eventually(async () => (await apiPhase()) === (await clusterPhase()), { timeout: 60_000 }).catch(
        () => mismatches++,
      );
      catchUpMs.push(performance.now() - t1);
      await held;
    }
    // At rest, the views agree.
    const finalApi = await apiPhase();
    const finalCluster = await clusterPhase();
    if (finalApi !== finalCluster) mismatches++;
    const wakes = await wakeRequests(ns.name, id);
    const answered = outcomes.get('answered');
    const passed = answered === cycles * 3 && wakes === sleeps && mismatches === 0;
    const text = report(
      {
        suite: 'Watch dropped and 410 Gone',
        setup: `Kubernetes mode on the local control plane; the API's watches go through a proxy that drops them, refuses new ones for ${blindMs / 1000} s after the operator woke the endpoint, then answers the next watch of each resource with 410 Gone (Expired). ${cycles} cycles, each with 3 requests held through a wake the API did not see.`,
        rows: [
          ['cycles (sleeps)', sleeps],
          ['held requests answered / sent', `${answered} / ${cycles * 3}`],
          ['outcomes', outcomes.toString()],
          ['WakeRequested events / sleeps', `${wakes} / ${sleeps}`],
          [
            'watches dropped / refused (503) / expired (410)',
            `${proxy.stats.dropped} / ${proxy.stats.refused} / ${proxy.stats.expired}`,
          ],
          ['API view caught up with the cluster after the 410', quantiles(catchUpMs)],
          ['held request time (includes the blind window)', quantiles(heldMs)],
          ['views disagreeing after a relist', mismatches],
        ],
        passed,
      },
      startedAt,
    );
    return { text, passed };
  } finally {
    await deleteEndpoints(ns.name);
    await api.stop();
    await proxy.close();
    await engines.close();
    await op.stop();
    await hub.close();
    await ns.remove();
    rmSync(dir, { recursive: true, force: true });
  }
}
