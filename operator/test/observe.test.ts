import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { mostSevere } from '../src/core/failures.ts';
import { classifyPods, HUB_TOKEN_REMEDY, observeWorkload, startTiming } from '../src/k8s/observe.ts';

const opts = { crashLoopRestarts: 3 };
const pod = (status: V1Pod['status']): V1Pod => ({ metadata: { name: 'p' }, status });

describe('classifyPods', () => {
  it('sees image pull back-off', () => {
    const f = classifyPods(
      [
        pod({
          containerStatuses: [
            {
              name: 'engine',
              image: 'x:1',
              imageID: '',
              ready: false,
              restartCount: 0,
              state: { waiting: { reason: 'ImagePullBackOff', message: 'not found' } },
            },
          ],
        }),
      ],
      opts,
    );
    expect(f?.kind).toBe('ImagePull');
    expect(f?.message).toMatch(/x:1: not found/);
  });

  it('ignores a single ErrImagePull (may be transient)', () => {
    expect(
      classifyPods(
        [
          pod({
            containerStatuses: [
              {
                name: 'engine',
                image: 'x',
                imageID: '',
                ready: false,
                restartCount: 0,
                state: { waiting: { reason: 'ErrImagePull' } },
              },
            ],
          }),
        ],
        opts,
      ),
    ).toBeUndefined();
  });

  it('sees OOM from the termination reason or the log tail, even while crash-looping', () => {
    const oomKilled = pod({
      containerStatuses: [
        {
          name: 'engine',
          image: 'x',
          imageID: '',
          ready: false,
          restartCount: 5,
          state: { waiting: { reason: 'CrashLoopBackOff' } },
          lastState: { terminated: { exitCode: 137, reason: 'OOMKilled' } },
        },
      ],
    });
    expect(classifyPods([oomKilled], opts)?.kind).toBe('OutOfMemory');
    const cudaOom = pod({
      containerStatuses: [
        {
          name: 'engine',
          image: 'x',
          imageID: '',
          ready: false,
          restartCount: 1,
          state: { waiting: { reason: 'CrashLoopBackOff' } },
          lastState: {
            terminated: {
              exitCode: 1,
              reason: 'Error',
              message: 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB',
            },
          },
        },
      ],
    });
    const f = classifyPods([cudaOom], opts);
    expect(f?.kind).toBe('OutOfMemory');
    expect(f?.message).toMatch(/CUDA out of memory/);
  });

  it('sees a gated model in the termination message, and ranks OOM above it and a crash loop below', () => {
    const gated = pod({
      containerStatuses: [
        {
          name: 'engine',
          image: 'x',
          imageID: '',
          ready: false,
          restartCount: 4,
          state: { waiting: { reason: 'CrashLoopBackOff' } },
          lastState: {
            terminated: {
              exitCode: 1,
              message: 'INFO start\nhuggingface_hub.errors.GatedRepoError: 401 Client Error.\n',
            },
          },
        },
      ],
    });
    const f = classifyPods([gated], opts);
    expect(f).toEqual({
      kind: 'GatedModel',
      message: `The model is gated or private and the engine has no valid hub token (pod p: huggingface_hub.errors.GatedRepoError: 401 Client Error.). ${HUB_TOKEN_REMEDY}`,
    });
    const oom = pod({
      containerStatuses: [
        {
          name: 'engine',
          image: 'x',
          imageID: '',
          ready: false,
          restartCount: 0,
          state: { running: {} },
          lastState: { terminated: { exitCode: 137, reason: 'OOMKilled' } },
        },
      ],
    });
    expect(classifyPods([gated, oom], opts)?.kind).toBe('OutOfMemory');
    expect(mostSevere([{ kind: 'CrashLoop', message: '' }, f!])).toBe(f);
  });

  it('calls a crash loop a failure only after enough restarts', () => {
    const crash = (restartCount: number) =>
      pod({
        containerStatuses: [
          {
            name: 'engine',
            image: 'x',
            imageID: '',
            ready: false,
            restartCount,
            state: { waiting: { reason: 'CrashLoopBackOff' } },
            lastState: { terminated: { exitCode: 1, message: 'ValueError: bad arg' } },
          },
        ],
      });
    expect(classifyPods([crash(1)], opts)).toBeUndefined();
    expect(classifyPods([crash(3)], opts)?.message).toMatch(/exit code 1: ValueError: bad arg/);
  });

  it('reports unschedulable pods', () => {
    expect(
      classifyPods(
        [
          pod({
            conditions: [
              {
                type: 'PodScheduled',
                status: 'False',
                reason: 'Unschedulable',
                message: '0/5 nodes are available',
              },
            ],
          }),
        ],
        opts,
      ),
    ).toEqual({ kind: 'Unschedulable', message: 'No node can run the engine yet: 0/5 nodes are available' });
  });

  it('counts ready pods that are not terminating', () => {
    const ready = pod({ conditions: [{ type: 'Ready', status: 'True' }] });
    const leaving: V1Pod = { ...ready, metadata: { name: 'q', deletionTimestamp: new Date() } };
    expect(observeWorkload(undefined, [ready, leaving], opts)).toEqual({ replicas: 0, readyReplicas: 1 });
  });
});

describe('startTiming', () => {
  const started = (
    name: string,
    created: string,
    scheduled: string,
    running: string,
    ready: string,
  ): V1Pod => ({
    metadata: { name, creationTimestamp: new Date(created) },
    status: {
      conditions: [
        { type: 'PodScheduled', status: 'True', lastTransitionTime: new Date(scheduled) },
        { type: 'Ready', status: 'True', lastTransitionTime: new Date(ready) },
      ],
      containerStatuses: [
        {
          name: 'engine',
          image: 'x',
          imageID: '',
          ready: true,
          restartCount: 0,
          state: { running: { startedAt: new Date(running) } },
        },
      ],
    },
  });

  it('splits the newest Ready pod’s start into scheduled, image ready and engine ready', () => {
    const old = started(
      'a',
      '2026-01-01T00:00:00Z',
      '2026-01-01T00:00:01Z',
      '2026-01-01T00:00:03Z',
      '2026-01-01T00:00:10Z',
    );
    const newer = started(
      'b',
      '2026-01-01T01:00:00Z',
      '2026-01-01T01:00:00.500Z',
      '2026-01-01T01:00:02.500Z',
      '2026-01-01T01:00:42.500Z',
    );
    expect(startTiming([old, newer])).toEqual({
      pod: 'b',
      createdAt: '2026-01-01T01:00:00.000Z',
      scheduledSeconds: 0.5,
      imageReadySeconds: 2,
      engineReadySeconds: 40,
      totalSeconds: 42.5,
    });
  });

  it('has nothing to say while no pod is Ready', () => {
    expect(startTiming([pod({ conditions: [{ type: 'PodScheduled', status: 'True' }] })])).toBeUndefined();
  });
});
