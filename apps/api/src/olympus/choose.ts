// Olympus's choice for a call: the model names that ask for it, may this key use it (spec §5.7),
// and which catalog model answers. The I/O half around pickModel() (./ranking.ts): the account's
// policy, the catalog, and each model's live state (cool-downs after 429, warm pools, measured
// latency) as the Elastic caller sees it, read only. The front door (inference/) asks it.
import type { ElasticCatalog } from '../elastic/catalog.ts';
import type { ElasticCaller } from '../elastic/call.ts';
import type { CatalogModel, ModelKind } from '../elastic/entry.ts';
import { generationLimit } from '../elastic/limits.ts';
import { ApiError } from '../platform/errors.ts';
import type { OlympusRepository } from './repository.ts';
import type { ToolRepository } from '../tools/repository.ts';
import type { ToolCaller } from '../tools/access.ts';
import { promptOf, type RouteMatch, type RouteMatcher } from './routing.ts';
import { toolAccess } from '../tools/access.ts';
import { pickModel, type Candidate, type Needs, type Objective, type Reason } from './ranking.ts';

/** The names of `model` that ask Olympus to choose. */
export const OLYMPUS_MODELS = ['auto', 'olympus', 'olympus-auto'] as const;
/** Why Olympus chose the model that answered (`route:<name>`, `cheapest`, …). */
export const OLYMPUS_HEADER = 'x-berth-olympus-reason';

export function isOlympusModel(model: unknown): boolean {
  return typeof model === 'string' && (OLYMPUS_MODELS as readonly string[]).includes(model);
}

/** Spec §5.7: Olympus enabled for the account and allowed by the key's tool pin; else 400 olympus_not_enabled. */
export async function requireOlympus(
  repo: Pick<ToolRepository, 'lookup'>,
  caller: ToolCaller,
): Promise<void> {
  const access = await toolAccess(repo, caller, ['olympus']);
  if (!access.ok) throw new ApiError('olympus_not_enabled', { param: 'model' });
}

export interface OlympusDeps {
  tools: Pick<ToolRepository, 'lookup'>;
  policies: Pick<OlympusRepository, 'get'>;
  catalog: Pick<ElasticCatalog, 'list' | 'get'>;
  live: Pick<ElasticCaller, 'state' | 'now'>;
  /** The policy's embedding routes (absent: routes are not matched). */
  routes?: RouteMatcher;
}

export interface OlympusAsk {
  /** The route's kinds (a completion route takes completion and chat models). */
  kinds: readonly ModelKind[];
  body: Record<string, unknown>;
  /** The body's size: the upper bound of the prompt in tokens, as billing reserves. */
  requestBytes: number;
  /** The request asks for tools (function or managed): only models that take `tools`. */
  tools: boolean;
  /** For the route embedding call: the request's id and signal. */
  requestId: string;
  signal: AbortSignal;
}

export interface OlympusChoice {
  model: CatalogModel;
  reason: Reason;
  objective: Objective;
  /** The models that fit the request and the policy (catalog order). */
  considered: string[];
  /** The next choices in order, not cooling down: tried when the chosen one is over capacity. */
  alternatives: string[];
  /** How the policy's routes were matched (absent: the policy has none). */
  routing?: RouteMatch;
}

/** The Elastic caller tries at most 8 models per call: the choice and 7 more. */
const MAX_ALTERNATIVES = 7;

/** The tokens one sequence may generate (elastic/limits.ts: as the engine reads the request). */
function maxTokens(body: Record<string, unknown>): number {
  return generationLimit(body).maxTokens ?? 0;
}

/** The request's needs, the account's policy, the catalog now → the model (or the ApiError why not). */
export async function chooseModel(
  deps: OlympusDeps,
  caller: ToolCaller,
  ask: OlympusAsk,
): Promise<OlympusChoice> {
  await requireOlympus(deps.tools, caller);
  const policy = await deps.policies.get(caller.accountId);
  const kind = ask.kinds[0]!;
  const needs: Needs = {
    kind,
    promptTokens: ask.requestBytes,
    maxTokens: maxTokens(ask.body),
    tools: ask.tools,
  };
  const models = new Map(deps.catalog.list().map((m) => [m.name, m]));
  // The quality objective ranks by the policy's own order: allowed_models lists the best first.
  const rank = new Map(policy.allowedModels.map((name, i) => [name, policy.allowedModels.length - i]));
  const candidates: Candidate[] = [...models.values()]
    .filter((m) => ask.kinds.includes(m.kind))
    .map((m) => {
      const live = deps.live.state(m);
      const quality = rank.get(m.name);
      return {
        name: m.name,
        kind,
        contextLength: m.contextLength ?? Number.MAX_SAFE_INTEGER,
        // The catalog does not record function calling per model; chat models are assumed to take tools.
        tools: m.kind === 'chat',
        inputPerMTok: m.pricing.inputPerMTok,
        outputPerMTok: m.pricing.outputPerMTok,
        warm: live.warm,
        ...(live.coolingUntil !== undefined ? { coolingUntil: live.coolingUntil } : {}),
        ...(live.latencyMs !== undefined ? { latencyMs: live.latencyMs } : {}),
        ...(quality !== undefined ? { quality } : {}),
      };
    });
  const rules = { allowedModels: policy.allowedModels, objective: policy.objective };
  // The prompt's meaning: at most one embedding call, within its budget; never fails the call.
  const routing =
    policy.routes.length && deps.routes
      ? await deps.routes.match(caller.accountId, policy, promptOf(ask.body), {
          requestId: ask.requestId,
          signal: ask.signal,
        })
      : undefined;
  const route =
    routing?.outcome === 'matched' && routing.nearest
      ? { name: routing.nearest.name, model: routing.nearest.model }
      : undefined;
  const now = deps.live.now();
  const choice = pickModel(needs, rules, candidates, now, route);
  if (!choice.ok) {
    if (choice.why === 'all_cooling')
      throw new ApiError('rate_limited', {
        message:
          'Every model Olympus may choose for this request is over capacity right now; retry with backoff',
        headers: { 'retry-after': '1' },
      });
    throw new ApiError('validation_error', {
      message: `Olympus found no catalog model for this request: it needs ${KIND[kind]}${needs.tools ? ' that takes tools' : ''} with a context of at least ${needs.promptTokens + needs.maxTokens} tokens${policy.allowedModels.length ? `, among the policy's allowed_models (${policy.allowedModels.join(', ')})` : ''}`,
      param: 'model',
    });
  }
  const considered = candidates
    .filter(
      (c) =>
        (!policy.allowedModels.length || policy.allowedModels.includes(c.name)) &&
        c.contextLength >= needs.promptTokens + needs.maxTokens &&
        (!needs.tools || c.tools),
    )
    .map((c) => c.name);
  const alternatives: string[] = [];
  let rest = candidates.filter((c) => c.name !== choice.model);
  while (alternatives.length < MAX_ALTERNATIVES) {
    const next = pickModel(needs, rules, rest, now);
    if (!next.ok) break;
    alternatives.push(next.model);
    rest = rest.filter((c) => c.name !== next.model);
  }
  return {
    model: models.get(choice.model)!,
    reason: choice.reason,
    objective: policy.objective,
    considered,
    alternatives,
    ...(routing ? { routing } : {}),
  };
}

/**
 * The model a call goes to on Olympus's choice: the chosen one, with Olympus's next choices after its
 * own fallbacks (over capacity, the call moves on to them).
 */
export function chosenModel(choice: Pick<OlympusChoice, 'model' | 'alternatives'>): CatalogModel {
  return {
    ...choice.model,
    fallbacks: [...new Set([...choice.model.fallbacks, ...choice.alternatives])],
  };
}

const KIND: Record<ModelKind, string> = {
  chat: 'a chat model',
  completion: 'a completion model',
  embedding: 'an embedding model',
};
