// A pod's span on the meter's clock: from its scheduling until it is gone or its containers finished;
// the meter's own moment of seeing a change when it came promptly, else the cluster's timestamp.
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { clusterTime, LIVE_EVENT_MS, podSpan } from '../src/dedicated/kubernetes/gpu-meter.ts';

const t = (s: string) => new Date(`2026-11-23T10:${s}Z`);
const same = (d: Date) => d;

function pod(p: { node?: string; scheduled?: Date; phase?: string; finished?: Date[] }): V1Pod {
  return {
    metadata: { name: 'p', creationTimestamp: t('00:00') },
    spec: { containers: [], ...(p.node ? { nodeName: p.node } : {}) },
    status: {
      phase: p.phase ?? 'Running',
      conditions: p.scheduled
        ? [{ type: 'PodScheduled', status: 'True', lastTransitionTime: p.scheduled }]
        : [],
      containerStatuses: (p.finished ?? []).map((f) => ({
        name: 'engine',
        image: 'x',
        imageID: '',
        ready: false,
        restartCount: 0,
        state: { terminated: { exitCode: 0, finishedAt: f } },
      })),
    },
  };
}

describe('clusterTime', () => {
  it('takes the meter’s moment when it came within LIVE_EVENT_MS after the cluster’s, else the cluster’s', () => {
    expect(clusterTime(t('00:00'), new Date(t('00:00').getTime() + LIVE_EVENT_MS))).toEqual(
      new Date(t('00:00').getTime() + LIVE_EVENT_MS),
    );
    expect(clusterTime(t('00:00'), new Date(t('00:00').getTime() + LIVE_EVENT_MS + 1))).toEqual(t('00:00'));
    expect(clusterTime(t('00:10'), t('00:09'))).toEqual(t('00:10')); // seen "before": the cluster's
    expect(clusterTime(undefined, t('00:09'))).toEqual(t('00:09'));
  });
});

describe('podSpan', () => {
  it('an unscheduled pod holds no GPU', () => {
    expect(podSpan(pod({}), { seenAt: t('00:01') }, same)).toBeUndefined();
  });

  it('a running pod seen promptly starts when the meter saw it; seen late (a relist, a restart), when it was scheduled', () => {
    expect(podSpan(pod({ node: 'n', scheduled: t('00:00') }), { seenAt: t('00:02') }, same)).toEqual({
      start: t('00:02'),
    });
    expect(podSpan(pod({ node: 'n', scheduled: t('00:00') }), { seenAt: t('05:00') }, same)).toEqual({
      start: t('00:00'),
    });
  });

  it('ends when the meter saw it deleted, or when its containers finished', () => {
    expect(
      podSpan(pod({ node: 'n', scheduled: t('00:00') }), { seenAt: t('00:01'), endedAt: t('30:00') }, same),
    ).toEqual({ start: t('00:01'), end: t('30:00') });
    expect(
      podSpan(
        pod({ node: 'n', scheduled: t('00:00'), phase: 'Failed', finished: [t('10:00'), t('12:00')] }),
        { seenAt: t('00:01'), endedAt: t('40:00') },
        same,
      ),
    ).toEqual({ start: t('00:01'), end: t('12:00') });
  });

  it('converts the cluster’s times to the meter’s clock', () => {
    const hourAhead = (d: Date) => new Date(d.getTime() + 3_600_000);
    expect(podSpan(pod({ node: 'n', scheduled: t('00:00') }), {}, hourAhead)).toEqual({
      start: new Date('2026-11-23T11:00:00Z'),
    });
  });
});
