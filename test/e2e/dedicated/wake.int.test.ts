// Scale to zero, and a burst of held requests that wakes the endpoint exactly once: bounded by
// scaling.maxHeldRequests, each answer marked as a cold start, the wake's receipt in status.
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
  patchSpec,
  op,
} from './fixture.ts';

useDedicatedEndpoints();

describe('scale to zero and wake on request', () => {
  it('hibernates when idle; a burst of held requests wakes it exactly once and all are answered', async () => {
    const { body } = await provision({
      model: 'org/small',
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15, maxHeldRequests: 8 },
    });
    const id = body.id;
    // Its engine takes 2 s to turn Ready (kwok's stage), as a start takes time: a wake to hold through.
    await patchSpec(id, { engine: { podAnnotations: { 'sim.berth.dev/ready-after': '2s' } } });
    await waitStatus(id, 'up', 90_000);
    const slept = await waitStatus(id, 'hibernated', 90_000);
    expect(slept.label).toBe('SLEEPING');
    // The phase turns as the operator scales to zero; the replica count follows the pod's exit.
    await eventually(async () => expect((await getEndpoint(id)).replicas).toBe(0), { timeout: 30_000 });
    await eventually(() => expect(api.runtime!.backends.addresses(id)).toEqual([]), { timeout: 30_000 });

    // A burst: one wake, every call held until a replica is Ready.
    const wakesBefore = api.upstream!.wakesSignalled;
    const accepted = async () =>
      (await op.metrics.wakeHints.get()).values.find((v) => v.labels.result === 'accepted')?.value ?? 0;
    const hintsBefore = await accepted();
    const client = sdk(id, acct.inference, { timeout: 120_000 });
    const burst = Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        client.chat.completions
          .create({ model: 'org/small', messages: [{ role: 'user', content: `wake ${i}` }] })
          .withResponse(),
      ),
    );
    await eventually(() => api.upstream!.holding(id) === 8, { timeout: 10_000, interval: 10 });

    // Opting out of the hold meanwhile: 503 at once, and no second wake.
    const quick = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: { ...json(acct.inference), 'x-berth-hold': 'false' },
      body: JSON.stringify({ model: 'org/small', messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(quick.status).toBe(503);
    // No wake of it measured yet (its build is not one): WAKE_RETRY_AFTER_SECONDS (30), less the
    // time this wake has run.
    expect(Number(quick.headers.get('retry-after'))).toBeGreaterThanOrEqual(25);
    expect(Number(quick.headers.get('retry-after'))).toBeLessThanOrEqual(30);
    expect((await quick.json()).error.code).toBe('endpoint_waking');
    // A ninth call that would wait: the endpoint holds 8 at the most.
    const ninth = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: json(acct.inference),
      body: JSON.stringify({ model: 'org/small', messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(ninth.status).toBe(503);
    expect((await ninth.json()).message).toBe(
      `Endpoint ${id} is waking up and already holds 8 calls (scaling.maxHeldRequests); retry in ${ninth.headers.get('retry-after')} s`,
    );

    const answers = await burst;
    expect(answers.every((a) => a.data.choices[0]!.message.content!.length > 0)).toBe(true);
    // Each waited through the wake, and is told so.
    for (const { response } of answers) {
      expect(response.headers.get('x-berth-cold-start')).toBe('true');
      expect(Number(response.headers.get('x-berth-wake-ms'))).toBeGreaterThan(0);
    }
    expect(api.upstream!.wakesSignalled - wakesBefore).toBeLessThanOrEqual(1);
    // The operator heard of it from the API directly (POST /wake), once, before the annotation.
    expect((await accepted()) - hintsBefore).toBe(1);
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

    // The receipt, from the request to the first byte: back on the node it ran on (warm).
    const wake = await eventually(
      async () => {
        const w = (await getEndpoint(id)).wake;
        return w?.firstByteAt ? w : false;
      },
      { timeout: 30_000, description: 'a complete wake receipt' },
    );
    expect(wake).toMatchObject({ inProgress: false, stage: 'done', placement: 'warm' });
    expect(wake.node).toMatch(/^gpu-h100-[01]$/);
    for (const k of ['requestedAt', 'scaledAt', 'scheduledAt', 'imageReadyAt', 'engineReadyAt'])
      expect(Date.parse(wake[k])).not.toBeNaN();
    const status = JSON.parse(
      await kubectlOk(['get', 'dedicatedendpoint', id, '-n', ns.name, '-o', 'jsonpath={.status.lastWake}']),
    );
    expect(status).toMatchObject({ node: wake.node, placement: 'warm', firstByteAt: wake.firstByteAt });
    // The operator's histogram of it, stage by stage.
    const stages = (await op.metrics.wakeStage.get()).values.filter((v) => v.metricName?.endsWith('_count'));
    for (const stage of ['signal', 'scheduled', 'image', 'engine', 'total'])
      expect(stages.find((v) => v.labels.stage === stage)?.value, stage).toBeGreaterThanOrEqual(1);

    // A second wake: now its wakes were measured, Retry-After comes from them (it woke in seconds),
    // not from the 30 s default; a client bounds its own hold with X-Berth-Hold-Timeout.
    const measured = Date.parse(wake.firstByteAt) - Date.parse(wake.requestedAt);
    await waitStatus(id, 'hibernated', 90_000);
    await eventually(async () => expect((await getEndpoint(id)).replicas).toBe(0), { timeout: 30_000 });
    const t0 = Date.now();
    const bounded = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: { ...json(acct.inference), 'x-berth-hold-timeout': '0.5' },
      body: JSON.stringify({ model: 'org/small', messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(450);
    expect(bounded.status).toBe(503);
    const retry = Number(bounded.headers.get('retry-after'));
    expect((await bounded.json()).message).toBe(
      `Endpoint ${id} did not become ready within 0.5 s; retry in ${retry} s`,
    );
    expect(retry).toBeGreaterThanOrEqual(1);
    expect(retry).toBeLessThanOrEqual(Math.ceil(measured / 1000) + 2);
    expect(retry).toBeLessThan(25);
    // The wake it asked for goes on: a held call is answered.
    const again = await client.chat.completions
      .create({ model: 'org/small', messages: [{ role: 'user', content: 'again' }] })
      .withResponse();
    expect(again.response.headers.get('x-berth-cold-start')).toBe('true');
    expect(api.upstream!.wakesSignalled - wakesBefore).toBeLessThanOrEqual(2);
  }, 240_000);
});
