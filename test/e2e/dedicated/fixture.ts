// The world the dedicated-endpoint end-to-end suites run in, one per test file: a namespace on the
// real control plane, the operator reconciling it on kwok GPU nodes, an engine simulator serving each
// pod on the pod's own (loopback) IP, the API, and two accounts; with the helpers the suites share.
// The bindings below are live: they hold this file's world once its beforeAll has run.
import OpenAI from 'openai';
import { afterAll, beforeAll, expect } from 'vitest';
import { API_VERSION, KIND } from '@berth/crds';
import type { OperatorHandle } from '@berth/operator';
import {
  deleteEndpoints,
  kubeconfigPath,
  kubectlOk,
  loadKubeConfig,
  testNamespace,
} from '../../cluster/env.ts';
import { bearer, startTestApi, type TestApi } from '../../support/api.ts';
import { eventually } from '../../support/eventually.ts';
import { patchEndpointSpec } from '../../support/endpoint-spec.ts';
import { startFakeHub } from '../../support/fake-hub.ts';
import { installCrd, start, testConfig } from '../../support/operator.ts';
import { servePodEngines, type PodEngines } from '../../support/pod-engines.ts';

export let ns: Awaited<ReturnType<typeof testNamespace>>;
export let hub: Awaited<ReturnType<typeof startFakeHub>>;
export let op: OperatorHandle;
export let engines: PodEngines;
export let api: TestApi;
export let acct: Awaited<ReturnType<TestApi['newAccount']>>;
export let other: Awaited<ReturnType<TestApi['newAccount']>>;

/**
 * Registers the hooks that build the world before the file's tests and tear it down after; `env` adds
 * to the API's configuration (e.g. the dashboard's development identity provider).
 */
const WAKE_TOKEN = 'e2e-wake-token-0123456789';

export function useDedicatedEndpoints(env: Record<string, string> = {}): void {
  beforeAll(async () => {
    await installCrd();
    ns = await testNamespace('e2e-proxy');
    hub = await startFakeHub();
    // As the chart sets them up: the API tells the operator of a wake directly (POST /wake).
    op = await start(
      testConfig(ns.name, hub.url, {
        leaderElection: false,
        provisioningTimeoutSeconds: 120,
        wakeToken: WAKE_TOKEN,
      }),
    );
    engines = await servePodEngines(loadKubeConfig(), ns.name);
    api = await startTestApi({
      KUBECONFIG: kubeconfigPath(),
      BERTH_NAMESPACE: ns.name,
      BERTH_OPERATOR_URL: `http://127.0.0.1:${op.metricsPort}`,
      BERTH_WAKE_TOKEN: WAKE_TOKEN,
      PUBLIC_RATE_LIMIT_PER_CLIENT: '4',
      WAKE_HOLD_TIMEOUT_MS: '90000',
      USAGE_FLUSH_INTERVAL_MS: '60000',
      ...env,
    });
    acct = await api.newAccount();
    other = await api.newAccount();
  }, 180_000);

  afterAll(async () => {
    // Terminate through the API while the operator still runs, so finalizers are released.
    if (api && acct) {
      const list = await (
        await fetch(api.url + '/api/endpoints', { headers: bearer(acct.global) })
      )
        .json()
        .catch(() => ({ data: [] }));
      for (const e of list.data ?? [])
        await fetch(`${api.url}/api/endpoints/${e.id}`, { method: 'DELETE', headers: bearer(acct.global) });
    }
    await deleteEndpoints(ns.name);
    await api?.stop();
    await engines?.close();
    await op?.stop();
    await hub?.close();
    await ns?.remove();
  }, 120_000);
}

export const json = (key: string) => ({ ...bearer(key), 'content-type': 'application/json' });

export async function provision(body: Record<string, unknown>, key = acct.compute) {
  const res = await fetch(api.url + '/api/endpoints', {
    method: 'POST',
    headers: json(key),
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

export async function getEndpoint(id: string, key = acct.compute) {
  return (await fetch(`${api.url}/api/endpoints/${id}`, { headers: bearer(key) })).json();
}

export async function waitStatus(id: string, status: string, timeout = 60_000) {
  return eventually(
    async () => {
      const e = await getEndpoint(id);
      expect(e.status).toBe(status);
      return e;
    },
    { timeout },
  );
}

export function sdk(id: string, apiKey: string, opts: Partial<ConstructorParameters<typeof OpenAI>[0]> = {}) {
  return new OpenAI({ baseURL: `${api.url}/api/d/${id}`, apiKey, maxRetries: 0, ...opts });
}

/** `kubectl apply` of a DedicatedEndpoint owned by the test account (the other way in). */
export async function kubectlApplyEndpoint(id: string, spec: Record<string, unknown>) {
  const manifest = {
    apiVersion: API_VERSION,
    kind: KIND,
    metadata: { name: id, namespace: ns.name },
    spec: { account: acct.id, model: { id: 'org/small' }, ...spec },
  };
  await kubectlOk(['apply', '-f', '-'], { input: JSON.stringify(manifest) });
}

/** `kubectl patch` (merge) of an endpoint's spec in this file's namespace. */
export const patchSpec = (id: string, spec: Record<string, unknown>) => patchEndpointSpec(ns.name, id, spec);
