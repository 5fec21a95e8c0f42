// Scale to zero, and a burst of held requests that wakes the endpoint exactly once.
import { describe, expect, it } from 'vitest';
import { kubectlOk } from '../../cluster/env.ts';
import { eventually } from '../../support/eventually.ts';
import {
  api,
  acct,
  ns,
  provision,
  getEndpoint,
  waitStatus,
  sdk,
  json,
  useDedicatedEndpoints,
} from './fixture.ts';

useDedicatedEndpoints();

describe('scale to zero and wake on request', () => {
  it('hibernates when idle; a burst of held requests wakes it exactly once and all are answered', async () => {
    const { body } = await provision({
      model: 'org/small',
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
    });
    const id = body.id;
    await waitStatus(id, 'up', 90_000);
    const slept = await waitStatus(id, 'hibernated', 90_000);
    expect(slept.label).toBe('SLEEPING');
    // The phase turns as the operator scales to zero; the replica count follows the pod's exit.
    await eventually(async () => expect((await getEndpoint(id)).replicas).toBe(0), { timeout: 30_000 });
    await eventually(() => expect(api.runtime!.backends.addresses(id)).toEqual([]), { timeout: 30_000 });

    // Opting out of the hold: 503 at once (it still asks for a wake, which the burst below reuses).
    const quick = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: { ...json(acct.inference), 'x-berth-hold': 'false' },
      body: JSON.stringify({ model: 'org/small', messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(quick.status).toBe(503);
    expect(quick.headers.get('retry-after')).toBe('10');
    expect((await quick.json()).error.code).toBe('endpoint_waking');

    const wakesBefore = api.upstream!.wakesSignalled;
    const client = sdk(id, acct.inference, { timeout: 120_000 });
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        client.chat.completions.create({
          model: 'org/small',
          messages: [{ role: 'user', content: `wake ${i}` }],
        }),
      ),
    );
    expect(answers.every((a) => a.choices[0]!.message.content!.length > 0)).toBe(true);
    expect(api.upstream!.wakesSignalled - wakesBefore).toBeLessThanOrEqual(1);
    const events = JSON.parse(
      await kubectlOk([
        'get',
        'events',
        '-n',
        ns.name,
        '--field-selector',
        `involvedObject.name=${id}`,
        '-o',
        'json',
      ]),
    ) as { items: { reason: string; count?: number }[] };
    const waking = events.items.filter((e) => /wak/i.test(e.reason));
    expect(waking.reduce((n, e) => n + (e.count ?? 1), 0)).toBe(1);
    expect((await getEndpoint(id)).status).toBe('up');
  });
});
