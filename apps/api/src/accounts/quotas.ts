// Per-account quotas: how many active keys, endpoints, GPUs and Chronos runs one account may hold. The
// limits come from the configuration (BERTH_QUOTA_*); the checks live where the things are created (the
// key and Chronos repositories' transactions, the endpoint service's account lock), and the refusal is
// one error.
import type { DedicatedEndpoint } from '@berth/crds';
import type { Config } from '../platform/config.ts';
import { ApiError } from '../platform/errors.ts';

export interface Quotas {
  /** Active (not revoked) API keys. */
  keys: number;
  /** Dedicated endpoints that are not being terminated. */
  endpoints: number;
  /** Σ scaling.maxReplicas × hardware.gpuCount over those endpoints: what they may scale to. */
  gpus: number;
  /** Chronos scheduled runs (each holds a pending job and fires on its schedule). */
  chronos_runs: number;
}

export type QuotaName = keyof Quotas;

/** What the platform operator set for one account (PATCH /admin/accounts/{id}/quotas); null: the default. */
export type QuotaOverrides = { [K in QuotaName]: number | null };

/** The BERTH_QUOTA_* defaults of every account. */
export function configuredQuotas(
  config: Pick<
    Config,
    'BERTH_QUOTA_KEYS' | 'BERTH_QUOTA_ENDPOINTS' | 'BERTH_QUOTA_GPUS' | 'BERTH_QUOTA_CHRONOS_RUNS'
  >,
): Quotas {
  return {
    keys: config.BERTH_QUOTA_KEYS,
    endpoints: config.BERTH_QUOTA_ENDPOINTS,
    gpus: config.BERTH_QUOTA_GPUS,
    chronos_runs: config.BERTH_QUOTA_CHRONOS_RUNS,
  };
}

/** The limits that apply to an account: its overrides, else the configured defaults. */
export function effectiveQuotas(defaults: Quotas, overrides: QuotaOverrides | null): Quotas {
  return {
    keys: overrides?.keys ?? defaults.keys,
    endpoints: overrides?.endpoints ?? defaults.endpoints,
    gpus: overrides?.gpus ?? defaults.gpus,
    chronos_runs: overrides?.chronos_runs ?? defaults.chronos_runs,
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
  chronos_runs: {
    what: 'Chronos scheduled runs',
    variable: 'BERTH_QUOTA_CHRONOS_RUNS',
    lower: 'delete runs you no longer need (DELETE /api/chronos/runs/{id})',
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

/**
 * What an account's endpoints count against its quotas: the endpoints not being terminated (they
 * take no calls and are going away) and their GPUs, leaving out endpoint `except`. Endpoints applied
 * with kubectl count, though no quota stopped them.
 */
export function endpointUsage(
  endpoints: Iterable<DedicatedEndpoint>,
  accountId: string,
  except?: string,
): { endpoints: number; gpus: number } {
  let count = 0;
  let gpus = 0;
  for (const e of endpoints) {
    if (e.spec.account !== accountId || e.metadata.deletionTimestamp || e.metadata.name === except) continue;
    count++;
    gpus += endpointGpus(e.spec);
  }
  return { endpoints: count, gpus };
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
