// Which hibernated platform endpoints a Chronos pre-warm wakes for steps on `auto`, without a
// server: Olympus's own chooseModel() with the real route matcher (bag-of-words embeddings of the
// engine simulator), a catalog of endpoint-backed pools and an external model, and the pools'
// phases. The pre-warm wakes what the step will run on at the fire: a matching route's model, else
// the objective's first choice once its pool is awake — not the model that happens to be warm now.
import type { DedicatedEndpoint } from '@berth/crds';
import { embed } from '@berth/engine-sim';
import { describe, expect, it } from 'vitest';
import { prewarmTargets } from '../src/chronos/prewarm.ts';
import type { Step } from '../src/chronos/steps.ts';
import type { CatalogModel } from '../src/elastic/entry.ts';
import { routeMatcher } from '../src/olympus/routing.ts';
import type { OlympusPolicyRecord } from '../src/olympus/repository.ts';
import type { ToolRecord } from '../src/tools/repository.ts';

const chat = (name: string, price: bigint, backend: { endpoint: string } | { baseUrl: string }) =>
  ({
    name,
    kind: 'chat',
    backends: [backend],
    fallbacks: [],
    pricing: { inputPerMTok: price, outputPerMTok: price },
    contextLength: 32_768,
    updatedAt: new Date(0),
  }) as unknown as CatalogModel;

const MODELS: CatalogModel[] = [
  // The cheapest, on a pool that is hibernated now.
  chat('pool', 1n, { endpoint: 'endpt-pool' }),
  // Always warm, dearer.
  chat('ext', 5n, { baseUrl: 'http://ext.invalid/v1' }),
  // The code route's model, on another hibernated pool, the dearest.
  chat('coder', 9n, { endpoint: 'endpt-coder' }),
  {
    name: 'emb',
    kind: 'embedding',
    backends: [{ baseUrl: 'http://emb.invalid/v1' }],
    fallbacks: [],
    pricing: { inputPerMTok: 1n, outputPerMTok: 0n },
    updatedAt: new Date(0),
  } as unknown as CatalogModel,
];
const catalog = {
  list: () => MODELS,
  get: (name: string) => MODELS.find((m) => m.name === name),
};

const hibernated = (id: string) =>
  ({ metadata: { name: id }, spec: {}, status: { phase: 'hibernated' } }) as unknown as DedicatedEndpoint;
const ENDPOINTS = new Map([
  ['endpt-pool', hibernated('endpt-pool')],
  ['endpt-coder', hibernated('endpt-coder')],
]);

const policy = (p: Partial<OlympusPolicyRecord>): OlympusPolicyRecord => ({
  allowedModels: [],
  objective: 'cost',
  routes: [
    {
      name: 'code',
      model: 'coder',
      examples: ['Write a Python function that sorts a list', 'Fix the bug in this JavaScript code'],
    },
  ],
  routeThreshold: 0.5,
  embeddingModel: null,
  updatedAt: new Date(1),
  ...p,
});

function setup(p: Partial<OlympusPolicyRecord> = {}, olympusEnabled = true) {
  const embedded: string[][] = [];
  const tool = { id: 'olympus', kind: 'feature' } as ToolRecord;
  const deps = {
    catalog,
    tools: {
      lookup: async () => new Map([['olympus', { tool, enabled: olympusEnabled }]]),
    },
    olympus: { get: async () => policy(p) },
    // As the Elastic caller sees them: an external model is warm, a pool only with a ready replica.
    caller: {
      state: (m: CatalogModel) => ({ warm: m.backends.some((b) => !('endpoint' in b)) }),
      now: () => 0,
    },
    routes: routeMatcher({
      catalog,
      caller: {
        embed: async ({ inputs }) => {
          embedded.push(inputs);
          return inputs.map((t) => Array.from(embed(t, 64)));
        },
      },
      timeoutMs: 1000,
      logger: { warn() {}, info() {} },
    }),
    platform: { endpoints: { get: (id: string) => ENDPOINTS.get(id) }, upstream: { wake: async () => {} } },
  };
  return { deps, embedded };
}

const auto = (content: string): Step => ({
  type: 'chat',
  model: 'auto',
  messages: [{ role: 'user', content }],
  max_tokens: 8,
});
const call = { requestId: 'chronos-prewarm-test', signal: new AbortController().signal };
const woken = async (s: ReturnType<typeof setup>, steps: Step[]) =>
  (await prewarmTargets(s.deps, 'acct', steps, call)).map((t) => [t.endpoint.metadata.name, t.model, t.step]);

describe('pre-warm of steps on auto', () => {
  it('a prompt that matches a route wakes the route’s model’s pool', async () => {
    const s = setup();
    expect(await woken(s, [auto('Write a Python function that reverses a string')])).toEqual([
      ['endpt-coder', 'coder', 0],
    ]);
    // The examples, then the prompt: the route was matched by meaning.
    expect(s.embedded.at(-1)).toEqual(['Write a Python function that reverses a string']);
  });

  it('an unrelated prompt wakes the objective’s first choice, though another model is warm now', async () => {
    const s = setup();
    expect(await woken(s, [auto('What a lovely sunny day for a walk in the park')])).toEqual([
      ['endpt-pool', 'pool', 0],
    ]);
  });

  it('each step for its own prompt; a pool is woken once; a later step’s template is matched without the outputs', async () => {
    const s = setup();
    const steps: Step[] = [
      auto('Tell me about the weather'),
      auto('Fix the bug in this JavaScript code: {{steps.0.output}}'),
      auto('Another sunny walk in the park'),
    ];
    expect(await woken(s, steps)).toEqual([
      ['endpt-pool', 'pool', 0],
      ['endpt-coder', 'coder', 1],
    ]);
    expect(s.embedded.at(-2)).toEqual(['Fix the bug in this JavaScript code:']);
  });

  it('nothing to wake when the choice is an external model, Olympus is off, or no model fits', async () => {
    expect(await woken(setup({ allowedModels: ['ext'], routes: [] }), [auto('Write Python')])).toEqual([]);
    expect(await woken(setup({}, false), [auto('Write a Python function')])).toEqual([]);
    expect(await woken(setup({ allowedModels: ['emb'], routes: [] }), [auto('Write Python')])).toEqual([]);
  });
});
