// The account lock that keeps endpoint quotas exact across API replicas on Kubernetes: two endpoint
// services, each with its own PostgreSQL connection pool (two replicas), writing to one slow shared
// store (the API server), race for the last places of a quota.
import { DEFAULT_CATALOG, type DedicatedEndpoint, type DedicatedEndpointSpecInput } from '@berth/crds';
import { openMigratedDatabase, type Database } from '@berth/db';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@berth/test/support/postgres';
import { endpointService, type EndpointService } from '../src/dedicated/service.ts';
import { ApiError } from '../src/platform/errors.ts';
import { databaseAccountLock } from '../src/accounts/repository.ts';

let tdb: TestDatabase;
const replicas: Database[] = [];

beforeAll(async () => {
  tdb = await createTestDatabase('account-lock');
  for (let i = 0; i < 2; i++) replicas.push(await openMigratedDatabase({ kind: 'postgres', url: tdb.url }));
});
afterAll(async () => {
  for (const r of replicas) await r.close();
  await tdb?.drop();
});

/** The API server: writes take a while, and each replica's cache would lag them (not used here). */
function sharedStore() {
  const items = new Map<string, DedicatedEndpoint>();
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  return {
    items,
    ready: async () => {},
    // Each replica's informer: empty, as if it had not seen any of the writes yet.
    get: () => undefined,
    list: () => [],
    watch: () => () => {},
    close: async () => {},
    listFresh: async () => {
      await sleep(5);
      return [...items.values()];
    },
    async create(input: { id: string; displayName: string; spec: DedicatedEndpointSpecInput }) {
      await sleep(20);
      const e = {
        apiVersion: 'berth.dev/v1alpha1',
        kind: 'DedicatedEndpoint',
        metadata: { name: input.id, generation: 1 },
        spec: input.spec,
      } as DedicatedEndpoint;
      items.set(input.id, e);
      return e;
    },
    update: () => Promise.reject(new Error('not used')),
  };
}

describe('databaseAccountLock', () => {
  it('two replicas, 20 simultaneous creations for a quota of 5: exactly 5 created, 15 quota_exceeded', async () => {
    const store = sharedStore();
    const services: EndpointService[] = replicas.map((r) =>
      endpointService({
        catalog: DEFAULT_CATALOG,
        endpoints: store,
        quotas: async () => ({ endpoints: 5, gpus: 1000 }),
        lock: databaseAccountLock(r.prisma),
      }),
    );
    const body = {
      model: 'org/small',
      revision: 'main',
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      authMode: 'Private' as const,
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 60 },
    };
    const outcomes = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => services[i % 2]!.create('acct_race', body)),
    );
    const created = outcomes.filter((o) => o.status === 'fulfilled');
    const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as unknown] : []));
    expect(created).toHaveLength(5);
    expect(store.items.size).toBe(5);
    expect(refused).toHaveLength(15);
    for (const err of refused) {
      expect(err).toBeInstanceOf(ApiError);
      expect(err).toMatchObject({ status: 403, code: 'quota_exceeded', param: 'endpoints' });
    }
    // Another account is not held up by this one's lock.
    const other = await services[1]!.create('acct_other', body);
    expect(other.spec.account).toBe('acct_other');
  });
});
