// The dashboard's and the CLI's words for a wake (apps/cli/src/wake-text.ts): the WAKING UP banner's stage, and the
// receipt of the last wake on the endpoint page.
import { describe, expect, it } from 'vitest';
import { receiptText, secs, stageText, type Wake } from '../../apps/cli/src/wake-text.ts';

// A whole `wake` as GET /api/endpoints/{id} gives it (the words read only part of it).
const receipt: Wake & Record<string, unknown> = {
  inProgress: false,
  stage: 'done',
  startedAt: '2026-11-26T10:00:00.000Z',
  elapsedSeconds: 9.03,
  requestedAt: '2026-11-26T10:00:00.000Z',
  scaledAt: '2026-11-26T10:00:00.040Z',
  scheduledAt: '2026-11-26T10:00:00.300Z',
  imageReadyAt: '2026-11-26T10:00:01.300Z',
  engineReadyAt: '2026-11-26T10:00:09.000Z',
  firstByteAt: '2026-11-26T10:00:09.030Z',
  node: 'gpu-h100-0',
  placement: 'warm',
  seconds: { signal: 0.04, scheduled: 0.26, image: 1, engine: 7.7, firstByte: 0.03, total: 9.03 },
};

describe('the dashboard’s words for a wake', () => {
  it('names what each stage of a wake in progress waits for', () => {
    const at = (stage: Wake['stage'], placement: Wake['placement'] = null) =>
      stageText({
        stage,
        node: stage === 'signal' || stage === 'scheduled' ? null : 'gpu-h100-0',
        placement,
      });
    expect(at('signal')).toBe('Asking for a replica');
    expect(at('scheduled')).toBe('Waiting for a GPU node');
    expect(at('image')).toBe('Starting the engine on gpu-h100-0 (its image is pulled if the node lacks it)');
    expect(at('engine', 'warm')).toBe('Loading the model on gpu-h100-0, a node that has it cached');
    expect(at('engine', 'cold')).toBe('Loading the model on gpu-h100-0, a node new to it');
    expect(at('ready')).toBe('Engine ready; sending your request');
  });

  it('sums up a finished wake: its total, node and placement, then each stage', () => {
    expect(receiptText(receipt)).toEqual({
      summary: '9.0 s on gpu-h100-0 (warm node)',
      stages: 'signal 40 ms · node 260 ms · image 1.0 s · engine 7.7 s · first byte 30 ms',
    });
    const local = {
      ...receipt,
      node: null,
      placement: null,
      seconds: { ...receipt.seconds, firstByte: null },
    };
    expect(receiptText(local).summary).toBe('9.0 s');
    expect(receiptText(local).stages).not.toContain('first byte');
    expect(secs(85.3)).toBe('85 s');
  });
});
