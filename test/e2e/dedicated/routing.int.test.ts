// Replica routing on the real control plane: an endpoint with three engine-simulator replicas, a
// multi-turn chat workload through the official SDK, first with spec.routing.strategy roundRobin and
// then (kubectl patch) prefixAffinity. The engines' own prefix-cache counters and the client's time to
// first token show the difference; a strategy the CRD does not know is refused by the API server.
import { describe, expect, it } from 'vitest';
import { kubectl, kubectlOk } from '../../cluster/env.ts';
import { eventually } from '../../support/eventually.ts';
import { summarize } from '../../bench/stats.ts';
import { shuffled, words } from '../../bench/workload.ts';
import {
  acct,
  engines,
  kubectlApplyEndpoint,
  ns,
  patchSpec,
  sdk,
  useDedicatedEndpoints,
  waitStatus,
} from './fixture.ts';

useDedicatedEndpoints();

const id = 'endpt-routing-chat';
const CONVERSATIONS = 13;
const TURNS = 4;

type Message = { role: 'system' | 'user' | 'assistant'; content: string };

/** Runs the conversations turn by turn; returns the client's TTFTs and the engines' hit ratio. */
async function chatWorkload(tag: string) {
  for (const s of engines.forEndpoint(id)) s.resetPrefixCache();
  const before = engines.forEndpoint(id).map((s) => ({ ...s.metrics }));
  const client = sdk(id, acct.inference);
  const conversations: Message[][] = Array.from({ length: CONVERSATIONS }, (_, c) => [
    { role: 'system', content: 'You are a concise assistant.' },
    { role: 'user', content: words(200, `${tag}c${c}`) },
  ]);
  const ttfts: number[] = [];
  for (let turn = 0; turn < TURNS; turn++) {
    for (const c of shuffled(CONVERSATIONS, turn + 7)) {
      const messages = conversations[c]!;
      const t0 = performance.now();
      const stream = await client.chat.completions.create({ model: 'org/small', messages, stream: true });
      let first = 0;
      let text = '';
      for await (const chunk of stream) {
        if (!first) first = performance.now();
        text += chunk.choices[0]?.delta?.content ?? '';
      }
      ttfts.push(first - t0);
      messages.push(
        { role: 'assistant', content: text },
        { role: 'user', content: words(60, `${tag}c${c}t${turn}`) },
      );
    }
  }
  const after = engines.forEndpoint(id).map((s) => s.metrics);
  const hits = after.reduce((a, m, i) => a + m.prefixCacheHits - before[i]!.prefixCacheHits, 0);
  const queries = after.reduce((a, m, i) => a + m.prefixCacheQueries - before[i]!.prefixCacheQueries, 0);
  return { ttft: summarize(ttfts), hitRatio: hits / queries };
}

describe('replica routing', () => {
  it('prefixAffinity keeps each conversation on one replica: more prefix-cache hits and a shorter TTFT than roundRobin', async () => {
    await kubectlApplyEndpoint(id, {
      hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
      scaling: { minReplicas: 3, maxReplicas: 3, idleTimeoutSeconds: 900 },
      routing: { strategy: 'roundRobin' },
      // prefill dominates TTFT: 0.5 ms per prompt token the replica's prefix cache does not hold
      engine: { env: [{ name: 'SIM_PREFILL_MS_PER_TOKEN', value: '0.5' }] },
    });
    await waitStatus(id, 'up', 90_000);
    await eventually(
      async () => {
        const out = await kubectlOk([
          'get',
          'dedicatedendpoint',
          id,
          '-n',
          ns.name,
          '-o',
          'jsonpath={.status.readyReplicas}',
        ]);
        expect(out.trim()).toBe('3');
        expect(engines.forEndpoint(id)).toHaveLength(3);
      },
      { timeout: 60_000 },
    );

    const rr = await chatWorkload('rr');
    await patchSpec(id, { routing: { strategy: 'prefixAffinity' } });
    await eventually(async () => {
      const out = await kubectlOk([
        'get',
        'dedicatedendpoint',
        id,
        '-n',
        ns.name,
        '-o',
        'jsonpath={.spec.routing.strategy}',
      ]);
      expect(out.trim()).toBe('prefixAffinity');
    });
    // the API's informer sees the change within moments; the first calls of the run may still rotate
    await new Promise((r) => setTimeout(r, 1000));
    const pa = await chatWorkload('pa');
    const figures =
      `roundRobin: hit ratio ${(100 * rr.hitRatio).toFixed(1)} %, TTFT p50 ${rr.ttft.p50.toFixed(1)} ms; ` +
      `prefixAffinity: ${(100 * pa.hitRatio).toFixed(1)} %, ${pa.ttft.p50.toFixed(1)} ms`;
    // One call at a time: affinity reuses every earlier turn (turns 2–4 hit all but the new question
    // and the answer's last partial block), round robin only the turns that happened to land there.
    expect(pa.hitRatio, figures).toBeGreaterThan(0.55);
    expect(pa.hitRatio, figures).toBeGreaterThan(rr.hitRatio + 0.15);
    expect(pa.ttft.p50, figures).toBeLessThan(rr.ttft.p50);
  }, 240_000);

  it('a strategy the CRD does not know is refused by the API server, and nothing is created', async () => {
    const bad = {
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'DedicatedEndpoint',
      metadata: { name: 'endpt-routing-bad', namespace: ns.name },
      spec: {
        account: acct.id,
        model: { id: 'org/small' },
        hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
        routing: { strategy: 'random' },
      },
    };
    const r = await kubectl(['apply', '-f', '-'], { input: JSON.stringify(bad) });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('spec.routing.strategy: Unsupported value: "random"');
    const got = await kubectl(['get', 'dedicatedendpoint', 'endpt-routing-bad', '-n', ns.name]);
    expect(got.code).not.toBe(0);
  });
});
