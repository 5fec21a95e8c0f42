// Per-account quotas: how many active keys, endpoints and GPUs one account may hold. The limits come
// from the configuration (BERTH_QUOTA_*); the checks live where the things are created (the key
// repository's transaction, the endpoint service's account lock), and the refusal is one error.
import type { DedicatedEndpoint } from '@berth/crds';
import { ApiError } from './errors.ts';

export interface Quotas {
  /** Active (not revoked) API keys. */
  keys: number;
  /** Dedicated endpoints that are not being terminated. */
  endpoints: number;
  /** Σ scaling.maxReplicas × hardware.gpuCount over those endpoints: what they may scale to. */
  gpus: number;
}

export type QuotaName = keyof Quotas;

/** What the platform operator set for one account (PATCH /admin/accounts/{id}/quotas); null: the default. */
export type QuotaOverrides = { [K in QuotaName]: number | null };

/** The limits that apply to an account: its overrides, else the configured defaults. */
export function effectiveQuotas(defaults: Quotas, overrides: QuotaOverrides | null): Quotas {
  return {
    keys: overrides?.keys ?? defaults.keys,
    endpoints: overrides?.endpoints ?? defaults.endpoints,
    gpus: overrides?.gpus ?? defaults.gpus,
  };
}

const described: Record<QuotaName, { what: string; variable: string; lower: string }> = {
  keys: {
    what: 'active API keys',
    variable: 'BERTH_QUOTA_KEYS',
    lower: 'revoke keys you no longer use (DELETE /api/keys/{id})',
  },
  endpoints: {
    what: 'dedicated endpoints',
    variable: 'BERTH_QUOTA_ENDPOINTS',
    lower: 'terminate endpoints you no longer use (DELETE /api/endpoints/{id})',
  },
  gpus: {
    what: 'GPUs (scaling.maxReplicas × hardware.gpuCount, summed over your endpoints)',
    variable: 'BERTH_QUOTA_GPUS',
    lower: 'lower scaling.maxReplicas or hardware.gpuCount of an endpoint, or terminate one',
  },
};

/**
 * 403 `quota_exceeded`: names the quota, the account's usage, what the request would bring it to, the
 * limit, and both ways out. 403 rather than 429: waiting does not help, and the OpenAI SDKs retry 429.
 */
export function quotaExceeded(quota: QuotaName, usage: number, wouldBe: number, limit: number): ApiError {
  const d = described[quota];
  return new ApiError('quota_exceeded', {
    message:
      `Quota exceeded: ${d.what}: this account has ${usage} and the request would make it ${wouldBe}, ` +
      `above the limit of ${limit}. To stay within it, ${d.lower}; to raise it, ask the platform's operator ` +
      `(${d.variable} for every account, PATCH /admin/accounts/{id}/quotas for one).`,
    param: quota,
  });
}

/** An endpoint's share of the `gpus` quota: every replica it may scale to, with all its GPUs. */
export function endpointGpus(spec: Pick<DedicatedEndpoint['spec'], 'hardware' | 'scaling'>): number {
  return (spec.scaling?.maxReplicas ?? 1) * spec.hardware.gpuCount;
}

/** Work on one account at a time (quota checks and the writes they guard). */
export type AccountLock = <T>(accountId: string, fn: () => Promise<T>) => Promise<T>;

/**
 * One process's account lock: calls for the same account run one after another. Enough where one
 * process owns the endpoints (local mode); across replicas it is combined with a database lock.
 */
export function processAccountLock(): AccountLock {
  const tails = new Map<string, Promise<unknown>>();
  return async (accountId, fn) => {
    const before = tails.get(accountId) ?? Promise.resolve();
    const run = before.then(fn, fn);
    const tail = run.catch(() => {});
    tails.set(accountId, tail);
    try {
      return await run;
    } finally {
      if (tails.get(accountId) === tail) tails.delete(accountId);
    }
  };
}
