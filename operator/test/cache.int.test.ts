import { LABEL_ENDPOINT, LABEL_MANAGED_BY, MANAGED_BY } from '@berth/crds';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testNamespace } from '@berth/test/cluster/env';
import { Cluster, installCrd } from '@berth/test/support/operator';
import { KubeCache } from '../src/k8s/cache.ts';
import { reuseConnections } from '../src/k8s/connections.ts';

// The operator's informer caches on the real API server keep objects without their managedFields
// (nothing reads them; they are often the largest part of an object), and everything else intact.

let ns: Awaited<ReturnType<typeof testNamespace>>;
let k: Cluster;
let cache: KubeCache;

beforeAll(async () => {
  await installCrd();
  ns = await testNamespace('op-cache');
  k = new Cluster(ns.name);
  reuseConnections(k.kc);
  cache = new KubeCache({
    kc: k.kc,
    namespace: ns.name,
    log: pino({ level: 'silent' }),
    onInformerError: () => {},
    enqueue: () => {},
  });
  await cache.start();
}, 60_000);

afterAll(async () => {
  await cache?.stop();
  await k?.releaseAll();
  await ns?.remove();
});

const until = async (what: () => boolean) => {
  for (let i = 0; i < 200 && !what(); i++) await new Promise((r) => setTimeout(r, 50));
  return what();
};

describe('informer caches', () => {
  it('drop managedFields from endpoints, Deployments, Services and pods, and keep the rest', async () => {
    const name = 'endpt-cache-1';
    await k.create(
      name,
      { account: 'acct', model: { id: 'org/small' }, hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 } },
      { note: 'kept' },
    );
    const labels = { [LABEL_MANAGED_BY]: MANAGED_BY, [LABEL_ENDPOINT]: name, app: name };
    await k.core.createNamespacedService({
      namespace: ns.name,
      body: { metadata: { name, labels }, spec: { selector: { app: name }, ports: [{ port: 8000 }] } },
    });
    await k.apps.createNamespacedDeployment({
      namespace: ns.name,
      body: {
        metadata: { name, labels },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: name } },
          template: {
            metadata: { labels },
            spec: { containers: [{ name: 'engine', image: 'example.invalid/engine:1' }] },
          },
        },
      },
    });
    const ep = () => cache.endpoints.informer.get(name, ns.name);
    const dep = () => cache.deployments.informer.get(name, ns.name);
    const svc = () => cache.services.informer.get(name, ns.name);
    const key = `${ns.name}/${name}`;
    const parsed = () => cache.endpoint(key);
    const pods = () =>
      parsed() ? cache.podsOf(parsed()!).filter((p) => (p.status?.conditions?.length ?? 0) > 0) : [];
    expect(await until(() => !!ep() && !!dep() && !!svc() && pods().length > 0)).toBe(true);

    // The API server keeps them: the live objects have managedFields.
    const live = await k.apps.readNamespacedDeployment({ name, namespace: ns.name });
    expect(live.metadata?.managedFields?.length).toBeGreaterThan(0);

    for (const obj of [ep(), dep(), svc(), ...pods()]) {
      expect(obj?.metadata?.managedFields).toBeUndefined();
      expect(obj?.metadata?.resourceVersion).toBeTruthy();
    }
    expect(ep()?.metadata?.annotations?.note).toBe('kept');
    expect(parsed()?.spec.model.id).toBe('org/small');
    expect(dep()?.spec?.template.spec?.containers[0]?.image).toBe('example.invalid/engine:1');
    expect(svc()?.spec?.ports?.[0]?.port).toBe(8000);
    expect(pods()[0]?.metadata?.labels?.[LABEL_ENDPOINT]).toBe(name);

    // An update keeps them out too.
    await k.mergePatch(name, { metadata: { annotations: { note: 'changed' } } });
    expect(await until(() => ep()?.metadata?.annotations?.note === 'changed')).toBe(true);
    expect(ep()?.metadata?.managedFields).toBeUndefined();
  });
});
