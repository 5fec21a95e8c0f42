// Olympus's embedding routes: the policy's `routes` (example prompts per model) matched against the
// request's prompt by meaning. The prompt (the last user message, at most PROMPT_CHARS characters) is
// embedded with one call to a catalog embedding model through the Elastic call path (the backends,
// fallbacks and cool-downs of /api/embeddings, not charged), and compared by cosine similarity to the
// example prompts' embeddings, which are computed once per policy version (in the background, on
// PUT or on the first request that needs them) and kept in memory. Nothing here fails a call: a
// failed or slow embedding (over `timeoutMs`) is an outcome, and Olympus then chooses by objective.
import type { ElasticCaller } from '../elastic/call.ts';
import type { ElasticCatalog } from '../elastic/catalog.ts';
import type { CatalogModel } from '../elastic/entry.ts';
import type { Logger } from '../platform/logger.ts';
import type { OlympusPolicyRecord } from './repository.ts';

/** The prompt (and each example) is embedded from at most this many characters (its start). */
export const PROMPT_CHARS = 2000;
/** Example prompts per embedding call when a policy's examples are embedded. */
const EXAMPLE_BATCH = 32;
/** After the examples could not be embedded, requests wait this long before they are tried again. */
const RETRY_MS = 5000;

export type RouteOutcome =
  | 'matched'
  | 'below_threshold'
  | 'no_prompt'
  | 'no_embedding_model'
  | 'embedding_failed'
  | 'embedding_timeout';

export const ROUTE_OUTCOMES: readonly RouteOutcome[] = [
  'matched',
  'below_threshold',
  'no_prompt',
  'no_embedding_model',
  'embedding_failed',
  'embedding_timeout',
];

export interface RouteMatch {
  outcome: RouteOutcome;
  /** The embedding model used (or that would have been). */
  embeddingModel?: string;
  /** The nearest route and its best similarity, also when below the threshold (for tuning). */
  nearest?: { name: string; model: string; similarity: number };
}

export interface RouteMatcherDeps {
  catalog: Pick<ElasticCatalog, 'list' | 'get'>;
  caller: Pick<ElasticCaller, 'embed'>;
  /** Budget of a request's embedding call, and of its wait for the examples' vectors. */
  timeoutMs: number;
  /** Budget of one batch of example prompts (default 30 s). */
  examplesTimeoutMs?: number;
  logger: Pick<Logger, 'warn' | 'info'>;
  /** Each request's outcome (metrics). */
  count?: (outcome: RouteOutcome) => void;
  /** Accounts whose example vectors are kept (least recently used evicted; default 1000). */
  maxAccounts?: number;
  /** Example vector values kept in all, as float32 (default 32 Mi = 128 MiB; least recently used evicted). */
  maxFloats?: number;
  now?: () => number;
}

export interface RouteMatcher {
  /** The route for this prompt under the policy (which has routes), with at most one embedding call. */
  match(
    accountId: string,
    policy: OlympusPolicyRecord,
    prompt: string,
    call: { requestId: string; signal: AbortSignal },
  ): Promise<RouteMatch>;
  /** Starts embedding the policy's examples (after PUT), so requests find them ready. */
  warm(accountId: string, policy: OlympusPolicyRecord): void;
}

interface RouteVectors {
  name: string;
  model: string;
  vectors: Float32Array[];
}

interface Examples {
  key: string;
  ready?: RouteVectors[];
  pending?: Promise<RouteVectors[]>;
  failedAt?: number;
  /** Float values held by `ready` while it is in the cache. */
  floats: number;
}

/** The text a request asks about: the last user message of `messages` or `input`, or `prompt`. */
export function promptOf(body: Record<string, unknown>): string {
  const text = (content: unknown): string => {
    if (typeof content === 'string') return content;
    if (!Array.isArray(content)) return '';
    return content
      .map((p: unknown) => {
        const part = p as { type?: unknown; text?: unknown };
        return (part?.type === 'text' || part?.type === 'input_text') && typeof part.text === 'string'
          ? part.text
          : '';
      })
      .filter(Boolean)
      .join('\n');
  };
  const lastUser = (items: unknown): string => {
    if (!Array.isArray(items)) return '';
    for (let i = items.length - 1; i >= 0; i--) {
      const m = items[i] as { role?: unknown; content?: unknown } | null;
      if (m && typeof m === 'object' && m.role === 'user') return text(m.content);
    }
    return '';
  };
  if (Array.isArray(body.messages)) return lastUser(body.messages);
  if (typeof body.input === 'string') return body.input;
  if (Array.isArray(body.input)) return lastUser(body.input);
  if (typeof body.prompt === 'string') return body.prompt;
  if (Array.isArray(body.prompt)) {
    const strings = body.prompt.filter((p): p is string => typeof p === 'string');
    return strings.at(-1) ?? '';
  }
  return '';
}

/** At most `limit` characters of the trimmed text, never half a surrogate pair. */
export function bounded(text: string, limit: number): string {
  let t = text.trim();
  if (t.length > limit) {
    t = t.slice(0, limit);
    const last = t.charCodeAt(t.length - 1);
    if (last >= 0xd800 && last <= 0xdbff) t = t.slice(0, -1);
  }
  return t;
}

/** The policy's embedding model, or the cheapest catalog embedding model (then by name). */
export function embeddingModelFor(
  catalog: Pick<ElasticCatalog, 'list' | 'get'>,
  policy: Pick<OlympusPolicyRecord, 'embeddingModel'>,
): CatalogModel | undefined {
  if (policy.embeddingModel) {
    const m = catalog.get(policy.embeddingModel);
    return m?.kind === 'embedding' ? m : undefined;
  }
  let best: CatalogModel | undefined;
  for (const m of catalog.list())
    if (
      m.kind === 'embedding' &&
      (!best ||
        m.pricing.inputPerMTok < best.pricing.inputPerMTok ||
        (m.pricing.inputPerMTok === best.pricing.inputPerMTok && m.name < best.name))
    )
      best = m;
  return best;
}

/** Rejects with the signal's reason once it aborts (the promise itself runs on). */
function until<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', abort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', abort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', abort);
        reject(e as Error);
      },
    );
  });
}

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

export function routeMatcher(deps: RouteMatcherDeps): RouteMatcher {
  const now = deps.now ?? (() => performance.now());
  const max = deps.maxAccounts ?? 1000;
  const maxFloats = deps.maxFloats ?? 32 * 1024 * 1024;
  let floats = 0;
  const examplesTimeoutMs = deps.examplesTimeoutMs ?? 30_000;
  const cache = new Map<string, Examples>();

  const keyOf = (policy: OlympusPolicyRecord, model: CatalogModel) =>
    `${policy.updatedAt?.getTime() ?? 0}\u0000${model.name}\u0000${model.updatedAt.getTime()}`;

  const embedExamples = async (
    accountId: string,
    policy: OlympusPolicyRecord,
    model: CatalogModel,
  ): Promise<RouteVectors[]> => {
    const limit = Math.min(PROMPT_CHARS, model.contextLength ?? PROMPT_CHARS);
    const flat = policy.routes.flatMap((r, i) =>
      r.examples.map((e) => ({ route: i, text: bounded(e, limit) })),
    );
    const out: RouteVectors[] = policy.routes.map((r) => ({ name: r.name, model: r.model, vectors: [] }));
    for (let i = 0; i < flat.length; i += EXAMPLE_BATCH) {
      const batch = flat.slice(i, i + EXAMPLE_BATCH);
      const vectors = await deps.caller.embed({
        model,
        inputs: batch.map((b) => b.text),
        requestId: `olympus-examples-${accountId}`,
        signal: AbortSignal.timeout(examplesTimeoutMs),
      });
      batch.forEach((b, j) => out[b.route]!.vectors.push(Float32Array.from(vectors[j]!)));
    }
    deps.logger.info(
      { accountId, embeddingModel: model.name, examples: flat.length },
      'olympus: route examples embedded',
    );
    return out;
  };

  const remove = (accountId: string, entry: Examples) => {
    cache.delete(accountId);
    floats -= entry.floats;
    entry.floats = 0;
  };
  /** The least recently used accounts' vectors go while over either limit (never `keep`'s). */
  const evict = (keep: Examples) => {
    for (const [accountId, entry] of cache) {
      if (cache.size <= max && floats <= maxFloats) return;
      if (entry !== keep) remove(accountId, entry);
    }
  };

  /** The example vectors of this policy version: ready, pending (started now if need be), or failed. */
  const examples = (
    accountId: string,
    policy: OlympusPolicyRecord,
    model: CatalogModel,
  ): RouteVectors[] | Promise<RouteVectors[]> | Error => {
    const key = keyOf(policy, model);
    const entry = cache.get(accountId);
    if (entry && entry.key === key) {
      cache.delete(accountId);
      cache.set(accountId, entry);
      if (entry.ready) return entry.ready;
      if (entry.pending) return entry.pending;
      if (entry.failedAt !== undefined && now() - entry.failedAt < RETRY_MS)
        return new Error('the route examples could not be embedded (retried after 5 s)');
    }
    const e: Examples = { key, floats: 0 };
    e.pending = embedExamples(accountId, policy, model).then(
      (ready) => {
        delete e.pending;
        e.ready = ready;
        if (cache.get(accountId) === e) {
          e.floats = ready.reduce((n, r) => n + r.vectors.reduce((m, v) => m + v.length, 0), 0);
          floats += e.floats;
          evict(e);
        }
        return ready;
      },
      (err: unknown) => {
        delete e.pending;
        e.failedAt = now();
        deps.logger.warn(
          { accountId, embeddingModel: model.name, err: message(err) },
          'olympus: route examples could not be embedded; choosing by objective until they are',
        );
        throw err;
      },
    );
    e.pending.catch(() => {}); // awaited by requests; a warm() nobody waits for must not go unhandled
    if (entry) remove(accountId, entry);
    cache.set(accountId, e);
    evict(e);
    return e.pending;
  };

  return {
    warm(accountId, policy) {
      if (!policy.routes.length) return;
      const model = embeddingModelFor(deps.catalog, policy);
      if (model) examples(accountId, policy, model);
    },

    async match(accountId, policy, prompt, call) {
      const done = (m: RouteMatch): RouteMatch => {
        deps.count?.(m.outcome);
        return m;
      };
      const model = embeddingModelFor(deps.catalog, policy);
      if (!model) return done({ outcome: 'no_embedding_model' });
      const text = bounded(prompt, Math.min(PROMPT_CHARS, model.contextLength ?? PROMPT_CHARS));
      if (!text) return done({ outcome: 'no_prompt', embeddingModel: model.name });
      // One signal for the call: the request's own, the budget, or a cancel below (a plain
      // controller and a cleared timer, cheaper per request than AbortSignal.any/timeout).
      const stop = new AbortController();
      const signal = stop.signal;
      let timeout = false;
      const timer = setTimeout(() => {
        timeout = true;
        stop.abort(new DOMException(`over ${deps.timeoutMs} ms`, 'TimeoutError'));
      }, deps.timeoutMs);
      const cancel = () => stop.abort(call.signal.reason);
      if (call.signal.aborted) cancel();
      else call.signal.addEventListener('abort', cancel, { once: true });
      let inFlight = true;
      try {
        const known = examples(accountId, policy, model);
        if (known instanceof Error) throw known;
        const embedding = deps.caller
          .embed({ model, inputs: [text], requestId: call.requestId, signal })
          .finally(() => (inFlight = false));
        const [routes, vectors] = await Promise.all([
          Array.isArray(known) ? known : until(known, signal),
          embedding,
        ]);
        const prompt = vectors[0]!;
        let nearest: RouteMatch['nearest'];
        for (const r of routes)
          for (const v of r.vectors) {
            const similarity = cosine(prompt, v);
            if (!nearest || similarity > nearest.similarity)
              nearest = { name: r.name, model: r.model, similarity };
          }
        return done({
          outcome: nearest && nearest.similarity >= policy.routeThreshold ? 'matched' : 'below_threshold',
          embeddingModel: model.name,
          ...(nearest ? { nearest } : {}),
        });
      } catch (err) {
        deps.logger.warn(
          { accountId, requestId: call.requestId, embeddingModel: model.name, err: message(err) },
          timeout
            ? `olympus: the route embedding took over ${deps.timeoutMs} ms; choosing by objective`
            : 'olympus: the route embedding failed; choosing by objective',
        );
        return done({
          outcome: timeout ? 'embedding_timeout' : 'embedding_failed',
          embeddingModel: model.name,
        });
      } finally {
        // Cancel the embedding call if it still runs (the examples failed or timed out first).
        clearTimeout(timer);
        call.signal.removeEventListener('abort', cancel);
        if (inFlight) stop.abort();
      }
    },
  };
}

/** Cosine similarity of unit-free vectors (0 when either is zero). */
export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * (b[i] ?? 0);
    na += a[i]! * a[i]!;
    nb += (b[i] ?? 0) * (b[i] ?? 0);
  }
  return na === 0 || nb === 0 ? 0 : dot / Math.sqrt(na * nb);
}

/** The route whose closest example prompt is nearest the prompt, if at least `threshold` similar. */
export function matchRoute<
  R extends { name: string; model: string; vectors: readonly (readonly number[])[] },
>(prompt: readonly number[], routes: readonly R[], threshold: number): R | undefined {
  let best: R | undefined;
  let score = threshold;
  for (const r of routes)
    for (const v of r.vectors) {
      const s = cosine(prompt, v);
      if (s >= score) {
        score = s;
        best = r;
      }
    }
  return best;
}
