// Activity: a stream longer than the idle timeout keeps its endpoint up.
import { describe, expect, it } from 'vitest';
import {
  acct,
  getEndpoint,
  waitStatus,
  sdk,
  kubectlApplyEndpoint,
  useDedicatedEndpoints,
} from './fixture.ts';

useDedicatedEndpoints();

describe('activity', () => {
  it('a stream longer than the idle timeout keeps the endpoint up and is never cut', async () => {
    const id = 'endpt-long-stream';
    await kubectlApplyEndpoint(id, {
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
      // 220 tokens at 100 ms: a 22 s stream against a 15 s idle timeout.
      engine: { env: [{ name: 'SIM_ITL_MS', value: '100' }] },
    });
    const up = await waitStatus(id, 'up', 90_000);
    const stream = await sdk(id, acct.inference, { timeout: 120_000 }).chat.completions.create({
      model: 'org/small',
      messages: [{ role: 'user', content: 'keep going' }],
      stream: true,
      max_tokens: 220,
      ...({ ignore_eos: true } as object),
    });
    let tokens = 0;
    let finish: string | null | undefined;
    for await (const c of stream) {
      if (c.choices[0]?.delta.content) tokens++;
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect(tokens).toBe(220);
    expect(finish).toBe('length');
    const after = await getEndpoint(id);
    expect(after.status).toBe('up');
    expect(after.lastTransitionTime).toBe(up.lastTransitionTime);
  }, 150_000);
});
