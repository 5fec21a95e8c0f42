import type { DedicatedEndpoint, DedicatedEndpointStatus } from '@berth/crds';
import { DEFAULT_CATALOG, DedicatedEndpointSpecSchema, FINALIZER } from '@berth/crds';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { reconcileKey, type ReconcileDeps } from '../src/core/reconcile.ts';
import type { PhaseEvent } from '../src/core/types.ts';

// A pass's writes to the endpoint itself: its status and its Events tell one transition to different
// readers, so the pass sends them together (one round trip of the API server, not two), and a lost
// Event never holds the status back.

const endpoint: DedicatedEndpoint = {
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'DedicatedEndpoint',
  metadata: { name: 'endpt-writes', namespace: 'ns', generation: 1, uid: 'u1', finalizers: [FINALIZER] },
  spec: DedicatedEndpointSpecSchema.parse({
    account: 'acct',
    model: { id: 'org/model' },
    hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
  }),
};

function deps(store: Pick<ReconcileDeps['store'], 'writeStatus' | 'recordEvent'>): ReconcileDeps {
  return {
    store: { get: () => endpoint, setFinalizer: async () => {}, ...store },
    driver: {
      observe: async () => ({ replicas: 0, readyReplicas: 0 }),
      apply: async () => {},
      url: () => 'http://endpt-writes.ns.svc:8000',
      hubToken: async () => ({ kind: 'none' }),
      checkSource: async () => ({ kind: 'passed', message: 'ok' }),
    },
    termination: { onTerminate: async () => {} },
    catalog: DEFAULT_CATALOG,
    phase: {
      deadlines: { provisioningSeconds: 1800, wakeSeconds: 600, hubUnreachableSeconds: 60 },
      scaling: { targetInFlightPerReplica: 8 },
    },
    log: pino({ level: 'silent' }),
  };
}

describe('a pass writing status and Events', () => {
  it('sends both at once: the status write is in flight when the Event is recorded', async () => {
    const order: string[] = [];
    let statusDone!: () => void;
    const statusWritten = new Promise<void>((r) => (statusDone = r));
    const pass = reconcileKey(
      'ns/endpt-writes',
      deps({
        writeStatus: async (_ep, status: DedicatedEndpointStatus) => {
          order.push(`status ${status.phase}/${status.reason}`);
          await statusWritten; // answered only after the Event was sent
          order.push('status answered');
        },
        recordEvent: async (_ep, event: PhaseEvent) => {
          order.push(`event ${event.reason}`);
          statusDone();
        },
      }),
    );
    await pass;
    expect(order).toEqual(['status building/Provisioning', 'event Provisioning', 'status answered']);
  });

  it('a failed status write still fails the pass, to be retried; the Event of the transition went out with it', async () => {
    const events: string[] = [];
    await expect(
      reconcileKey(
        'ns/endpt-writes',
        deps({
          writeStatus: async () => {
            throw new Error('conflict');
          },
          recordEvent: async (_ep, event) => {
            events.push(event.reason);
          },
        }),
      ),
    ).rejects.toThrow('conflict');
    expect(events).toEqual(['Provisioning']);
  });
});
