// The upstream of an external OpenAI-compatible base URL (an Elastic backend outside the platform):
// nothing to wake or hold and no replicas to choose among; every attempt goes to that URL.
import type { Upstream } from '../dedicated/upstream/types.ts';

export const externalUpstream: Upstream<{ baseUrl: string }> = {
  acquire: async ({ baseUrl }) => ({ ok: true, lease: { next: () => baseUrl, release() {} } }),
};
