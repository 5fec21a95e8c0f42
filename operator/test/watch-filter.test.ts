import type { V1Deployment, V1Pod, V1Service } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { deploymentFingerprint, podFingerprint, serviceFingerprint } from '../src/k8s/cache.ts';

// Which watch events are worth a pass: a change in what a pass reads (observe.ts, drift.ts) is; the
// Deployment controller's and the kubelet's bookkeeping is not.

const deployment = (status: V1Deployment['status'], meta: Partial<V1Deployment['metadata']> = {}) =>
  ({
    metadata: { name: 'e', namespace: 'ns', generation: 1, labels: { a: '1' }, ...meta },
    spec: { replicas: 1 },
    status,
  }) as V1Deployment;

const pod = (status: V1Pod['status']) =>
  ({
    metadata: { name: 'e-1', namespace: 'ns', creationTimestamp: new Date('2026-11-23T20:00:00Z') },
    status,
  }) as V1Pod;

describe('watch events that change nothing a pass reads enqueue nothing', () => {
  it('Deployment: bookkeeping is not a change; replica counts, spec generation and labels are', () => {
    const base = deploymentFingerprint(deployment({ replicas: 1, readyReplicas: 0 }));
    expect(
      deploymentFingerprint(
        deployment({
          replicas: 1,
          readyReplicas: 0,
          observedGeneration: 1,
          updatedReplicas: 1,
          unavailableReplicas: 1,
          conditions: [{ type: 'Progressing', status: 'True' }],
        }),
      ),
    ).toBe(base);
    expect(deploymentFingerprint(deployment({ replicas: 1, readyReplicas: 1 }))).not.toBe(base);
    expect(deploymentFingerprint(deployment({ replicas: 2, readyReplicas: 0 }))).not.toBe(base);
    expect(deploymentFingerprint(deployment({ replicas: 1, readyReplicas: 0 }, { generation: 2 }))).not.toBe(
      base,
    );
    expect(
      deploymentFingerprint(deployment({ replicas: 1, readyReplicas: 0 }, { labels: { a: '2' } })),
    ).not.toBe(base);
  });

  it('pod: its IP or phase alone is not a change; readiness, scheduling and container state are', () => {
    const running = { state: { running: { startedAt: new Date('2026-11-23T20:00:05Z') } } };
    const base = podFingerprint(
      pod({
        phase: 'Pending',
        conditions: [{ type: 'PodScheduled', status: 'True' }],
        containerStatuses: [
          { name: 'engine', image: 'i', imageID: '', ready: false, restartCount: 0, ...running },
        ],
      }),
    );
    expect(
      podFingerprint(
        pod({
          phase: 'Running',
          podIP: '10.0.0.1',
          conditions: [
            { type: 'PodScheduled', status: 'True' },
            { type: 'Initialized', status: 'True' },
          ],
          containerStatuses: [
            { name: 'engine', image: 'i', imageID: 'sha', ready: false, restartCount: 0, ...running },
          ],
        }),
      ),
    ).toBe(base);
    expect(
      podFingerprint(
        pod({
          phase: 'Running',
          conditions: [
            { type: 'PodScheduled', status: 'True' },
            { type: 'Ready', status: 'True' },
          ],
          containerStatuses: [
            { name: 'engine', image: 'i', imageID: '', ready: true, restartCount: 0, ...running },
          ],
        }),
      ),
    ).not.toBe(base);
    expect(
      podFingerprint(
        pod({
          conditions: [{ type: 'PodScheduled', status: 'True' }],
          containerStatuses: [
            { name: 'engine', image: 'i', imageID: '', ready: false, restartCount: 1, ...running },
          ],
        }),
      ),
    ).not.toBe(base);
  });

  it('Service: its status is not a change; its spec is', () => {
    const svc = (spec: V1Service['spec'], status?: V1Service['status']) =>
      ({ metadata: { name: 'e', namespace: 'ns' }, spec, status }) as V1Service;
    const base = serviceFingerprint(svc({ ports: [{ port: 8000 }] }));
    expect(serviceFingerprint(svc({ ports: [{ port: 8000 }] }, { loadBalancer: {} }))).toBe(base);
    expect(serviceFingerprint(svc({ ports: [{ port: 9000 }] }))).not.toBe(base);
  });
});
