// Olympus's route matcher without a server: which text a request is routed by, and how often the
// embedding model is called (the prompt once per request; a policy's examples once per version).
import { embed } from '@berth/engine-sim';
import { describe, expect, it } from 'vitest';
import type { CatalogModel } from '../src/elastic/entry.ts';
import { bounded, embeddingModelFor, promptOf, routeMatcher } from '../src/olympus/routing.ts';
import type { OlympusPolicyRecord } from '../src/olympus/repository.ts';

const model = (name: string, kind: CatalogModel['kind'], price: bigint): CatalogModel =>
  ({
    name,
    kind,
    backends: [],
    fallbacks: [],
    pricing: { inputPerMTok: price, outputPerMTok: 0n },
    updatedAt: new Date(0),
  }) as unknown as CatalogModel;

const catalog = (models: CatalogModel[]) => ({
  list: () => models,
  get: (name: string) => models.find((m) => m.name === name),
});

describe('promptOf: the text a request is routed by', () => {
  it('the last user message of chat messages or Responses input; prompt; text parts joined', () => {
    expect(
      promptOf({
        messages: [
          { role: 'user', content: 'first' },
          {
            role: 'user',
            content: [{ type: 'text', text: 'a' }, { type: 'image_url' }, { type: 'text', text: 'b' }],
          },
          { role: 'assistant', content: 'reply' },
        ],
      }),
    ).toBe('a\nb');
    expect(promptOf({ messages: [{ role: 'system', content: 'x' }] })).toBe('');
    expect(promptOf({ input: 'plain' })).toBe('plain');
    expect(
      promptOf({
        input: [{ role: 'user', content: [{ type: 'input_text', text: 'typed' }] }, { type: 'x' }],
      }),
    ).toBe('typed');
    expect(promptOf({ prompt: ['one', 'two'] })).toBe('two');
    expect(promptOf({ prompt: [1, 2, 3] })).toBe('');
    expect(promptOf({})).toBe('');
  });

  it('bounded: trimmed, at most the limit, never half a surrogate pair', () => {
    expect(bounded('  hello  ', 10)).toBe('hello');
    expect(bounded('abcdef', 3)).toBe('abc');
    expect(bounded('ab😀', 3)).toBe('ab');
  });

  it('the policy’s embedding model, else the cheapest catalog embedding model', () => {
    const c = catalog([
      model('chat', 'chat', 1n),
      model('e-big', 'embedding', 20n),
      model('e-b', 'embedding', 10n),
      model('e-a', 'embedding', 10n),
    ]);
    expect(embeddingModelFor(c, { embeddingModel: null })?.name).toBe('e-a');
    expect(embeddingModelFor(c, { embeddingModel: 'e-big' })?.name).toBe('e-big');
    expect(embeddingModelFor(c, { embeddingModel: 'chat' })).toBeUndefined();
    expect(embeddingModelFor(catalog([model('chat', 'chat', 1n)]), { embeddingModel: null })).toBeUndefined();
  });
});

describe('routeMatcher', () => {
  const policy = (updatedAt: number, threshold = 0.5): OlympusPolicyRecord => ({
    allowedModels: [],
    objective: 'cost',
    routes: [
      { name: 'code', model: 'coder', examples: ['Write a Python function', 'Fix this JavaScript bug'] },
      { name: 'legal', model: 'lawyer', examples: ['Review this contract clause'] },
    ],
    routeThreshold: threshold,
    embeddingModel: null,
    updatedAt: new Date(updatedAt),
  });

  function setup() {
    const calls: string[][] = [];
    const outcomes: string[] = [];
    const matcher = routeMatcher({
      catalog: catalog([model('e', 'embedding', 1n)]),
      caller: {
        embed: async ({ inputs }) => {
          calls.push(inputs);
          return inputs.map((t) => Array.from(embed(t, 64)));
        },
      },
      timeoutMs: 1000,
      logger: { warn() {}, info() {} },
      count: (o) => outcomes.push(o),
    });
    const call = { requestId: 'r', signal: new AbortController().signal };
    return { calls, outcomes, matcher, call };
  }

  it('examples embedded once per policy version; one call per request after that', async () => {
    const { calls, outcomes, matcher, call } = setup();
    const m = await matcher.match('acct', policy(1), 'Write a Python function to sort', call);
    expect(m).toMatchObject({
      outcome: 'matched',
      embeddingModel: 'e',
      nearest: { name: 'code', model: 'coder' },
    });
    expect(calls).toEqual([
      ['Write a Python function', 'Fix this JavaScript bug', 'Review this contract clause'],
      ['Write a Python function to sort'],
    ]);
    const legal = await matcher.match('acct', policy(1), 'Review this contract', call);
    expect(legal.nearest?.name).toBe('legal');
    expect(calls).toHaveLength(3);
    // The policy changed (a new version): its examples are embedded again, once.
    await matcher.match('acct', policy(2, 0.99), 'Write a Python function to sort', call);
    await matcher.match('acct', policy(2, 0.99), 'Write a Python function to sort', call);
    expect(calls).toHaveLength(6);
    expect(outcomes).toEqual(['matched', 'matched', 'below_threshold', 'below_threshold']);
  });

  it('the least recently used account’s vectors go when over maxFloats; its next request embeds them again', async () => {
    const calls: string[][] = [];
    const matcher = routeMatcher({
      catalog: catalog([model('e', 'embedding', 1n)]),
      caller: {
        embed: async ({ inputs }) => {
          calls.push(inputs);
          return inputs.map((t) => Array.from(embed(t, 64)));
        },
      },
      timeoutMs: 1000,
      logger: { warn() {}, info() {} },
      maxFloats: 3 * 64, // one account's three examples
    });
    const call = { requestId: 'r', signal: new AbortController().signal };
    await matcher.match('a', policy(1), 'Write a Python function', call);
    await matcher.match('a', policy(1), 'Write a Python function', call);
    expect(calls).toHaveLength(3); // examples once, then the prompt twice
    await matcher.match('b', policy(1), 'Write a Python function', call); // evicts a's
    expect(calls).toHaveLength(5);
    await matcher.match('a', policy(1), 'Write a Python function', call);
    expect(calls).toHaveLength(7); // a's examples again, and the prompt
    expect(calls[5]).toHaveLength(3);
  });

  it('warm() embeds the examples ahead of the first request; no prompt text: no call', async () => {
    const { calls, matcher, call } = setup();
    matcher.warm('acct', policy(1));
    expect(calls).toHaveLength(1);
    await matcher.match('acct', policy(1), 'Write a Python function', call);
    expect(calls).toHaveLength(2);
    expect(await matcher.match('acct', policy(1), '   ', call)).toEqual({
      outcome: 'no_prompt',
      embeddingModel: 'e',
    });
    expect(calls).toHaveLength(2);
  });

  it('examples that cannot be embedded: embedding_failed, no call for 5 s, then tried again', async () => {
    let clock = 0;
    let down = true;
    const calls: string[][] = [];
    const warnings: string[] = [];
    const matcher = routeMatcher({
      catalog: catalog([model('e', 'embedding', 1n)]),
      caller: {
        embed: async ({ inputs }) => {
          calls.push(inputs);
          if (down) throw new Error('connect ECONNREFUSED');
          return inputs.map((t) => Array.from(embed(t, 64)));
        },
      },
      timeoutMs: 1000,
      logger: { warn: (...args: unknown[]) => void warnings.push(String(args[1])), info() {} },
      now: () => clock,
    });
    const call = { requestId: 'r', signal: new AbortController().signal };
    const first = await matcher.match('acct', policy(1), 'Write a Python function', call);
    expect(first).toEqual({ outcome: 'embedding_failed', embeddingModel: 'e' });
    expect(warnings).toContain('olympus: the route embedding failed; choosing by objective');
    const made = calls.length;
    clock = 4999;
    expect((await matcher.match('acct', policy(1), 'Write a Python function', call)).outcome).toBe(
      'embedding_failed',
    );
    expect(calls).toHaveLength(made); // no call while backing off
    down = false;
    clock = 5000;
    expect((await matcher.match('acct', policy(1), 'Write a Python function', call)).outcome).toBe('matched');
  });
});
