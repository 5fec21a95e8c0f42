// Which catalog models may answer a call: the one asked for, then its fallbacks depth-first, those
// priced above it only when the key or the request opts in, and the reservation that covers the
// dearest of them; and which failures are worth the next backend (./call.ts tries them in order).
import { reservationBound } from '../platform/money.ts';
import { ApiError } from '../platform/errors.ts';
import type { ElasticCatalog } from './catalog.ts';
import type { CatalogModel, ModelKind } from './entry.ts';
import { generationLimit } from './limits.ts';

/** At most this many models are tried for one call (the requested one and its fallbacks). */
const MAX_MODELS = 8;
/** The request field that opts one call in to fallbacks priced above the model asked for. */
export const DEARER_FALLBACK_FIELD = 'allow_dearer_fallback';

/** What the plan reads of a call (./call.ts's ModelCall). */
export interface PlannedCall {
  model: CatalogModel;
  kinds: readonly ModelKind[];
  body: Record<string, unknown>;
  requestBytes: number;
  allowDearerFallback?: boolean;
}

/** The requested model, then its fallbacks depth-first, each once. */
function chain(catalog: ElasticCatalog, first: CatalogModel): CatalogModel[] {
  const out: CatalogModel[] = [];
  const seen = new Set<string>();
  const visit = (m: CatalogModel) => {
    if (seen.has(m.name) || out.length >= MAX_MODELS) return;
    seen.add(m.name);
    out.push(m);
    for (const f of m.fallbacks) {
      const next = catalog.get(f);
      if (next) visit(next);
    }
  };
  visit(first);
  return out;
}

/**
 * Worth another backend: capacity, overload, engine down. Not: the engine refused the request (any
 * 4xx — 400, 401, 403, 404, 413, 422, a content-policy refusal — would be refused elsewhere too).
 */
export function retriable(err: ApiError): boolean {
  return err.status === 429 || err.status >= 500;
}

/** Priced at or below `asked` on both input and output tokens: a fallback that cannot cost more. */
export function notDearer(m: CatalogModel, asked: CatalogModel): boolean {
  return (
    m.pricing.inputPerMTok <= asked.pricing.inputPerMTok &&
    m.pricing.outputPerMTok <= asked.pricing.outputPerMTok
  );
}

/** Whether the call may fall back to dearer models: the request's field, else the key's setting. */
function dearerAllowed(c: PlannedCall): boolean {
  const v = c.body[DEARER_FALLBACK_FIELD];
  if (v === undefined || v === null) return c.allowDearerFallback === true;
  if (typeof v !== 'boolean')
    throw new ApiError('validation_error', {
      message: `Invalid request body: ${DEARER_FALLBACK_FIELD}: must be true or false`,
      param: DEARER_FALLBACK_FIELD,
    });
  return v;
}

/**
 * The models a call may be answered by — the one asked for, then those of its fallbacks that cannot
 * cost more (or all of them, opted in) — the fallbacks left out for their price, and the reservation
 * that covers the dearest of them.
 */
export function callModels(
  catalog: ElasticCatalog,
  c: PlannedCall,
): { models: CatalogModel[]; skipped: string[]; bound: bigint } {
  const limit = c.kinds.includes('embedding') ? { maxTokens: 0, sequences: 1 } : generationLimit(c.body);
  const dearer = dearerAllowed(c);
  const reachable = chain(catalog, c.model).filter((m) => c.kinds.includes(m.kind));
  const models = reachable.filter((m) => m === c.model || dearer || notDearer(m, c.model));
  const skipped = reachable.filter((m) => !models.includes(m)).map((m) => m.name);
  const bound = models.reduce((max, m) => {
    const b = reservationBound({
      pricing: m.pricing,
      requestBytes: c.requestBytes,
      ...limit,
      ...(m.contextLength ? { contextLength: m.contextLength } : {}),
    });
    return b > max ? b : max;
  }, 0n);
  return { models, skipped, bound };
}
