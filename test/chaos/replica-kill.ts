// An API replica killed (SIGKILL) while calls are held during a wake, CHAOS_KILL_CYCLES times
// (default 3). Kubernetes mode on the local control plane: replica A runs in this process, replica B
// is its own process (the same database and cluster). Each cycle: the endpoint hibernates; 3 calls
// go to A and 3 to B; B is killed while they are held. Guarantees: A's calls all answered (its clients
// are unaffected); B's end with a connection error, which the OpenAI SDK retries (APIConnectionError),
// and the retry — sent through A, as a load balancer would — is answered; one wake per sleep.
import OpenAI from 'openai';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { GROUP, PLURAL, VERSION, type DedicatedEndpoint } from '@berth/crds';
import { deleteEndpoints, loadKubeConfig, testNamespace } from '../cluster/env.ts';
import { ADMIN_TOKEN, bearer, spawnApi, startTestApi, type ApiProcess } from '../support/api.ts';
import { eventually } from '../support/eventually.ts';
import { startFakeHub } from '../support/fake-hub.ts';
import { installCrd, start, testConfig } from '../support/operator.ts';
import { servePodEngines } from '../support/pod-engines.ts';
import { knob, quantiles, report, sleep, Tally, wakeRequests } from './lib.ts';

export async function replicaKill(): Promise<{ text: string; passed: boolean }> {
  const startedAt = Date.now();
  const cycles = knob('KILL_CYCLES', 3);
  await installCrd();
  const ns = await testNamespace('chaos-kill');
  const hub = await startFakeHub();
  const kc = loadKubeConfig();
  const engines = await servePodEngines(kc, ns.name);
  const op = await start(testConfig(ns.name, hub.url, { leaderElection: false }));
  const kubeconfig = process.env.KUBECONFIG!;
  const a = await startTestApi({
    KUBECONFIG: kubeconfig,
    BERTH_NAMESPACE: ns.name,
    WAKE_HOLD_TIMEOUT_MS: '120000',
  });
  const spawnB = () =>
    spawnApi({
      DATABASE_URL: a.db.url,
      ADMIN_TOKEN,
      KUBECONFIG: kubeconfig,
      BERTH_NAMESPACE: ns.name,
      WAKE_HOLD_TIMEOUT_MS: '120000',
    });
  let b: ApiProcess = await spawnB();
  const custom = kc.makeApiClient(CustomObjectsApi);
  try {
    const acct = await a.newAccount();
    const h = { ...bearer(acct.global), 'content-type': 'application/json' };
    const created = await fetch(`${a.url}/api/endpoints`, {
      method: 'POST',
      headers: h,
      body: JSON.stringify({
        model: 'org/small',
        hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
        scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
      }),
    });
    const { id } = (await created.json()) as { id: string };
    const phase = async () =>
      (
        (await custom.getNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace: ns.name,
          plural: PLURAL,
          name: id,
        })) as DedicatedEndpoint
      ).status?.phase;
    await eventually(async () => (await phase()) === 'up', { timeout: 120_000, description: 'up' });
    const client = (url: string) =>
      new OpenAI({ baseURL: `${url}/api/d/${id}`, apiKey: acct.inference, maxRetries: 0, timeout: 150_000 });
    const ask = (c: OpenAI, content: string) =>
      c.chat.completions.create({ model: id, messages: [{ role: 'user', content }], max_tokens: 4 });

    const onA = new Tally();
    const onB = new Tally();
    const retried = new Tally();
    const heldAtKill: string[] = [];
    const aMs: number[] = [];
    const retryMs: number[] = [];
    let sleeps = 0;
    for (let c = 0; c < cycles; c++) {
      await eventually(async () => (await phase()) === 'hibernated', {
        timeout: 120_000,
        interval: 500,
        description: `cycle ${c}: hibernated`,
      });
      sleeps++;
      const t0 = performance.now();
      const viaA = Promise.all(
        Array.from({ length: 3 }, (_, i) =>
          ask(client(a.url), `A ${c} ${i}`)
            .then(
              (r) => onA.add(r.choices[0]?.message.content ? 'answered' : 'empty'),
              (err: Error) => onA.add(`failed: ${err.constructor.name}: ${err.message.slice(0, 60)}`),
            )
            .finally(() => aMs.push(performance.now() - t0)),
        ),
      );
      const viaB = Promise.all(
        Array.from({ length: 3 }, (_, i) =>
          ask(client(b.url), `B ${c} ${i}`).then(
            (r) => onB.add(r.choices[0]?.message.content ? 'answered before the kill' : 'empty'),
            async (err: Error) => {
              // The SDK retries connection errors itself (maxRetries); here the retry goes to A.
              onB.add(
                err instanceof OpenAI.APIConnectionError
                  ? 'APIConnectionError (SDK retries)'
                  : `other: ${err.message.slice(0, 60)}`,
              );
              const t1 = performance.now();
              await ask(client(a.url), `B retry ${c} ${i}`).then(
                (r) => retried.add(r.choices[0]?.message.content ? 'answered' : 'empty'),
                (e: Error) => retried.add(`failed: ${e.message.slice(0, 60)}`),
              );
              retryMs.push(performance.now() - t1);
            },
          ),
        ),
      );
      await sleep(300);
      heldAtKill.push((await phase()) ?? 'unknown');
      b.child.kill('SIGKILL');
      await Promise.all([viaA, viaB]);
      b = await spawnB();
    }
    const wakes = await wakeRequests(ns.name, id);
    const killedWhileHeld = heldAtKill.filter((p) => p !== 'up').length;
    const passed =
      onA.get('answered') === cycles * 3 &&
      onB.get('APIConnectionError (SDK retries)') + onB.get('answered before the kill') === cycles * 3 &&
      retried.get('answered') === onB.get('APIConnectionError (SDK retries)') &&
      wakes === sleeps;
    const text = report(
      {
        suite: 'An API replica killed while calls are held during a wake',
        setup: `Kubernetes mode on the local control plane, two API replicas on one database (B its own process), the operator in-process. ${cycles} cycles: the endpoint hibernates, 3 calls to each replica through the official SDK, B killed with SIGKILL 300 ms later; B's failed calls retried through A.`,
        rows: [
          ['cycles (sleeps)', sleeps],
          ['phase when B was killed', heldAtKill.join(', ')],
          ['cycles where B was killed while its calls were held', `${killedWhileHeld} of ${cycles}`],
          ['calls on A (unaffected replica)', onA.toString()],
          ['calls on B (killed)', onB.toString()],
          ["B's calls retried through A", retried.toString()],
          ['time of the calls on A (held through the wake)', quantiles(aMs)],
          ['time of the retries', quantiles(retryMs)],
          ['WakeRequested events / sleeps', `${wakes} / ${sleeps}`],
        ],
        passed,
      },
      startedAt,
    );
    return { text, passed };
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
