// Olympus's ranking of catalog models for `model` = auto | olympus | olympus-auto: which candidate
// the request gets. A pure function of what the request needs, the account's policy, and each
// candidate's prices and current availability, so it is table-tested and costs microseconds (the
// benchmark measures it). ./choose.ts feeds it the catalog and the backends' state; the embedding
// route match (optional) is computed before, with one call to a catalog embedding model
// (./routing.ts).

export type Objective = 'cost' | 'latency' | 'quality';

export interface Candidate {
  name: string;
  kind: 'chat' | 'completion' | 'embedding';
  contextLength: number;
  /** Accepts `tools` (function calling). */
  tools: boolean;
  /** Micro-units per million tokens. */
  inputPerMTok: bigint;
  outputPerMTok: bigint;
  /** Typical time to first token, for the latency objective (unknown: last). */
  latencyMs?: number;
  /** Higher is better, for the quality objective (unknown: last). */
  quality?: number;
  /** Epoch ms until which its backend answered 429 and is left alone. */
  coolingUntil?: number;
  /** A replica is up now (false: the pool would have to wake). */
  warm: boolean;
}

export interface Needs {
  kind: Candidate['kind'];
  /** Upper bound of the prompt in tokens (the body's bytes, as billing reserves). */
  promptTokens: number;
  maxTokens: number;
  tools: boolean;
}

export interface Policy {
  /** Empty: every catalog model. */
  allowedModels: readonly string[];
  objective: Objective;
}

export type Reason = 'cheapest' | 'fastest' | 'best' | 'fallback' | `route:${string}`;

export type Choice =
  { ok: true; model: string; reason: Reason } | { ok: false; why: 'no_candidate' | 'all_cooling' };

const OBJECTIVE_REASON: Record<Objective, Reason> = { cost: 'cheapest', latency: 'fastest', quality: 'best' };

export function pickModel(
  needs: Needs,
  policy: Policy,
  candidates: readonly Candidate[],
  now: number,
  route?: { name: string; model: string },
): Choice {
  const allowed = policy.allowedModels.length ? new Set(policy.allowedModels) : undefined;
  const fits = candidates.filter(
    (c) =>
      c.kind === needs.kind &&
      (!allowed || allowed.has(c.name)) &&
      c.contextLength >= needs.promptTokens + needs.maxTokens &&
      (!needs.tools || c.tools),
  );
  if (fits.length === 0) return { ok: false, why: 'no_candidate' };
  const available = (c: Candidate) => !c.coolingUntil || c.coolingUntil <= now;

  if (route) {
    const target = fits.find((c) => c.name === route.model);
    if (target && available(target)) return { ok: true, model: target.name, reason: `route:${route.name}` };
  }

  const cost = (c: Candidate) =>
    BigInt(needs.promptTokens) * c.inputPerMTok + BigInt(needs.maxTokens) * c.outputPerMTok;
  const byCost = (a: Candidate, b: Candidate) => {
    const d = cost(a) - cost(b);
    return d < 0n ? -1 : d > 0n ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
  };
  const ranked = [...fits].sort((a, b) => {
    if (policy.objective === 'latency') {
      const d = (a.latencyMs ?? Infinity) - (b.latencyMs ?? Infinity);
      if (d !== 0 && !Number.isNaN(d)) return d;
    } else if (policy.objective === 'quality') {
      const d = (b.quality ?? -Infinity) - (a.quality ?? -Infinity);
      if (d !== 0 && !Number.isNaN(d)) return d;
    }
    return byCost(a, b);
  });
  // Prefer a warm pool; one that must wake only when no warm one is available.
  const chosen = ranked.find((c) => available(c) && c.warm) ?? ranked.find(available);
  if (!chosen) return { ok: false, why: 'all_cooling' };
  return {
    ok: true,
    model: chosen.name,
    // A route that matched but whose model could not take the call makes any choice a fallback.
    reason: chosen === ranked[0] && !route ? OBJECTIVE_REASON[policy.objective] : 'fallback',
  };
}
