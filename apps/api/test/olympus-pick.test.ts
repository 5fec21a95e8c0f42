import { describe, expect, it } from 'vitest';
import { pickModel, type Candidate, type Needs } from '../src/olympus/ranking.ts';
import { matchRoute, cosine } from '../src/olympus/routing.ts';
import { isOlympusModel } from '../src/olympus/choose.ts';

const NOW = 1_000_000;
const c = (name: string, over: Partial<Candidate> = {}): Candidate => ({
  name,
  kind: 'chat',
  contextLength: 8192,
  tools: true,
  inputPerMTok: 100_000n,
  outputPerMTok: 200_000n,
  warm: true,
  ...over,
});
const catalog = [
  c('small', {
    inputPerMTok: 50_000n,
    outputPerMTok: 100_000n,
    latencyMs: 80,
    quality: 1,
    contextLength: 4096,
    tools: false,
  }),
  c('mid', { latencyMs: 40, quality: 2 }),
  c('large', {
    inputPerMTok: 900_000n,
    outputPerMTok: 2_000_000n,
    latencyMs: 200,
    quality: 3,
    contextLength: 131072,
  }),
];
const needs: Needs = { kind: 'chat', promptTokens: 100, maxTokens: 100, tools: false };
const cost = { allowedModels: [], objective: 'cost' } as const;

describe('Olympus: pickModel', () => {
  it('answers by objective: cost → cheapest, latency → fastest, quality → best', () => {
    expect(pickModel(needs, cost, catalog, NOW)).toEqual({ ok: true, model: 'small', reason: 'cheapest' });
    expect(pickModel(needs, { allowedModels: [], objective: 'latency' }, catalog, NOW)).toEqual({
      ok: true,
      model: 'mid',
      reason: 'fastest',
    });
    expect(pickModel(needs, { allowedModels: [], objective: 'quality' }, catalog, NOW)).toEqual({
      ok: true,
      model: 'large',
      reason: 'best',
    });
  });

  it('considers what the request needs: context length, tools, kind', () => {
    expect(pickModel({ ...needs, promptTokens: 5000 }, cost, catalog, NOW)).toMatchObject({ model: 'mid' });
    expect(pickModel({ ...needs, promptTokens: 60_000 }, cost, catalog, NOW)).toMatchObject({
      model: 'large',
    });
    expect(pickModel({ ...needs, tools: true }, cost, catalog, NOW)).toMatchObject({
      model: 'mid',
      reason: 'cheapest',
    });
    expect(pickModel({ ...needs, kind: 'embedding' }, cost, catalog, NOW)).toEqual({
      ok: false,
      why: 'no_candidate',
    });
    expect(pickModel({ ...needs, promptTokens: 200_000 }, cost, catalog, NOW)).toEqual({
      ok: false,
      why: 'no_candidate',
    });
  });

  it('keeps to the allowed models', () => {
    expect(
      pickModel(needs, { allowedModels: ['large', 'mid'], objective: 'cost' }, catalog, NOW),
    ).toMatchObject({
      model: 'mid',
      reason: 'cheapest',
    });
  });

  it('skips a model in 429 cool-down (fallback), and takes it back once the cool-down is over', () => {
    const cooling = catalog.map((m) => (m.name === 'small' ? { ...m, coolingUntil: NOW + 5000 } : m));
    expect(pickModel(needs, cost, cooling, NOW)).toEqual({ ok: true, model: 'mid', reason: 'fallback' });
    expect(pickModel(needs, cost, cooling, NOW + 5000)).toEqual({
      ok: true,
      model: 'small',
      reason: 'cheapest',
    });
    const allCooling = catalog.map((m) => ({ ...m, coolingUntil: NOW + 1 }));
    expect(pickModel(needs, cost, allCooling, NOW)).toEqual({ ok: false, why: 'all_cooling' });
  });

  it('prefers a warm pool over one that would have to wake; a cold one only when none is warm', () => {
    const cold = catalog.map((m) => (m.name === 'small' ? { ...m, warm: false } : m));
    expect(pickModel(needs, cost, cold, NOW)).toEqual({ ok: true, model: 'mid', reason: 'fallback' });
    const allCold = catalog.map((m) => ({ ...m, warm: false }));
    expect(pickModel(needs, cost, allCold, NOW)).toEqual({ ok: true, model: 'small', reason: 'cheapest' });
  });

  it('a matched route wins when its model fits and is available', () => {
    const route = { name: 'code', model: 'large' };
    expect(pickModel(needs, cost, catalog, NOW, route)).toEqual({
      ok: true,
      model: 'large',
      reason: 'route:code',
    });
    const cooling = catalog.map((m) => (m.name === 'large' ? { ...m, coolingUntil: NOW + 1 } : m));
    // The route's model cooling down: the objective's choice, as a fallback from the route.
    expect(pickModel(needs, cost, cooling, NOW, route)).toEqual({
      ok: true,
      model: 'small',
      reason: 'fallback',
    });
    expect(pickModel(needs, { allowedModels: ['small'], objective: 'cost' }, catalog, NOW, route)).toEqual({
      ok: true,
      model: 'small',
      reason: 'fallback',
    });
  });

  it('matchRoute: the nearest example above the threshold; cosine is scale-free', () => {
    expect(cosine([1, 0], [2, 0])).toBeCloseTo(1);
    expect(cosine([1, 0], [0, 1])).toBe(0);
    expect(cosine([0, 0], [1, 1])).toBe(0);
    const routes = [
      { name: 'code', model: 'large', vectors: [[1, 0, 0]] },
      {
        name: 'chat',
        model: 'small',
        vectors: [
          [0, 1, 0],
          [0, 0.9, 0.1],
        ],
      },
    ];
    expect(matchRoute([0.1, 1, 0], routes, 0.8)?.name).toBe('chat');
    expect(matchRoute([1, 0.1, 0], routes, 0.8)?.name).toBe('code');
    expect(matchRoute([0, 0, 1], routes, 0.8)).toBeUndefined();
  });

  it('the Olympus model names', () => {
    for (const m of ['auto', 'olympus', 'olympus-auto']) expect(isOlympusModel(m)).toBe(true);
    for (const m of ['Auto', 'mid', undefined, 3]) expect(isOlympusModel(m)).toBe(false);
  });
});
