// What a key may pin (issue 36): a catalog chat model, one of the account's own dedicated endpoints,
// or Olympus — anything else is named as the problem, at write time.
import { describe, expect, it } from 'vitest';
import type { DedicatedEndpoint } from '@berth/crds';
import type { CatalogModel } from '../src/elastic/entry.ts';
import { pinnedModelProblem } from '../src/elastic/pinnable.ts';

const model = (name: string, kind: CatalogModel['kind']) => ({ name, kind }) as CatalogModel;
const catalog = new Map([
  ['chat-model', model('chat-model', 'chat')],
  ['embed', model('embed', 'embedding')],
  ['text', model('text', 'completion')],
]);
const endpoints = new Map([
  ['endpt-mine', { spec: { account: 'acct_a' } } as DedicatedEndpoint],
  ['endpt-theirs', { spec: { account: 'acct_b' } } as DedicatedEndpoint],
]);
const problem = (name: string, withEndpoints = true) =>
  pinnedModelProblem({ catalog, ...(withEndpoints ? { endpoints } : {}) }, 'acct_a', name);

describe('a pinned model', () => {
  it('may be a catalog chat model, Olympus, or one of the account’s own endpoints', () => {
    for (const ok of ['chat-model', 'auto', 'olympus', 'olympus-auto', 'endpt-mine'])
      expect(problem(ok)).toBeUndefined();
  });

  it('is refused, saying why: unknown, another account’s endpoint (as unknown), not a chat model', () => {
    expect(problem('nope')).toBe(
      'no catalog model or dedicated endpoint named nope (GET /api/models lists the catalog)',
    );
    expect(problem('endpt-theirs')).toBe('no dedicated endpoint endpt-theirs in this account');
    expect(problem('endpt-nowhere')).toBe('no dedicated endpoint endpt-nowhere in this account');
    expect(problem('endpt-mine', false)).toBe('no dedicated endpoint endpt-mine in this account');
    expect(problem('embed')).toBe('embed is an embedding model; /api/b/chat/completions needs a chat model');
    expect(problem('text')).toBe('text is a completion model; /api/b/chat/completions needs a chat model');
  });
});
