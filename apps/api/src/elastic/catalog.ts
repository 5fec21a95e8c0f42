// The Elastic catalog, served from memory: the request path never queries the database for it.
// Writes go to elastic_models, then every API replica reloads — this one at once, the others on
// NOTIFY `berth_catalog` (and after a lost listener connection, in case a notification was missed).
import { readFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { ApiError } from '../platform/errors.ts';
import { parse } from '../http/validate.ts';
import { parseAmount } from '../platform/money.ts';
import { pgListener, type PgListener } from '../platform/pg-listener.ts';
import {
  entryBody,
  FALLBACK_KINDS,
  KIND_NAME,
  type Backend,
  type CatalogModel,
  type EntryBody,
  type StoredBackend,
} from './entry.ts';
import type { CatalogRepository, ModelRow } from './repository.ts';
import type { Sealer } from '../platform/sealed.ts';

export const CATALOG_CHANNEL = 'berth_catalog';

export interface ElasticCatalog {
  get(name: string): CatalogModel | undefined;
  /** Every entry, by name. */
  list(): readonly CatalogModel[];
  /** Validates and stores an entry (create or replace); true when created. */
  put(name: string, entry: EntryBody): Promise<boolean>;
  /** False when there was no such entry; 409 when another entry falls back to it. */
  delete(name: string): Promise<boolean>;
  /** Reads the table again (NOTIFY, tests). */
  reload(): Promise<void>;
  close(): Promise<void>;
}

export interface CatalogDeps {
  repo: CatalogRepository;
  logger: Logger;
  /** Seals external API keys; without it, entries with an apiKey are refused. */
  sealer?: Sealer;
  /** Whether a platform endpoint exists (undefined: dedicated endpoints are not configured). */
  endpointExists?: (id: string) => boolean;
  /** Sends NOTIFY after a write (PostgreSQL); absent with the embedded database (one process). */
  notify?: () => Promise<void>;
}

function invalid(message: string, param: string): ApiError {
  return new ApiError('validation_error', { message: `Invalid catalog entry: ${param}: ${message}`, param });
}

/** The models reachable by following fallbacks from `start`, or the cycle found. */
function findCycle(start: string, fallbacksOf: (n: string) => readonly string[]): string[] | undefined {
  const path: string[] = [];
  const visit = (n: string): string[] | undefined => {
    const at = path.indexOf(n);
    if (at !== -1) return [...path.slice(at), n];
    path.push(n);
    for (const f of fallbacksOf(n)) {
      const c = visit(f);
      if (c) return c;
    }
    path.pop();
    return undefined;
  };
  return visit(start);
}

export async function elasticCatalog(deps: CatalogDeps): Promise<ElasticCatalog> {
  let models = new Map<string, CatalogModel>();
  let sorted: CatalogModel[] = [];

  const toModel = (r: ModelRow): CatalogModel => ({
    name: r.name,
    kind: r.kind,
    pricing: { inputPerMTok: r.inputPerMTok, outputPerMTok: r.outputPerMTok },
    ...(r.contextLength !== null ? { contextLength: r.contextLength } : {}),
    fallbacks: r.fallbacks,
    backends: r.backends.map((b): Backend => {
      if ('endpoint' in b) return { endpoint: b.endpoint };
      if (!b.secret) return { baseUrl: b.baseUrl, model: b.model };
      if (!deps.sealer)
        throw new Error(`catalog model ${r.name} has a sealed secret and BERTH_SECRETS_KEY is not set`);
      return { baseUrl: b.baseUrl, model: b.model, apiKey: deps.sealer.open(b.secret, `model:${r.name}`) };
    }),
    updatedAt: r.updatedAt,
  });

  const reload = async () => {
    const rows = await deps.repo.all();
    const next = new Map<string, CatalogModel>();
    for (const r of rows) {
      try {
        next.set(r.name, toModel(r));
      } catch (err) {
        deps.logger.error({ model: r.name, err: (err as Error).message }, 'catalog entry skipped');
      }
    }
    models = next;
    sorted = [...next.values()];
  };
  await reload();

  const changed = async () => {
    await reload();
    await deps.notify?.();
  };

  return {
    get: (name) => models.get(name),
    list: () => sorted,
    async put(name, entry) {
      entry.backends.forEach((b, i) => {
        if (b.endpoint !== undefined) {
          if (!deps.endpointExists)
            throw invalid('dedicated endpoints are not configured on this API', `backends.${i}.endpoint`);
          if (!deps.endpointExists(b.endpoint))
            throw invalid(`no dedicated endpoint ${b.endpoint}`, `backends.${i}.endpoint`);
        }
        if (b.apiKey !== undefined && !deps.sealer)
          throw invalid('set BERTH_SECRETS_KEY on the API to store backend secrets', `backends.${i}.apiKey`);
      });
      const fits = FALLBACK_KINDS[entry.kind];
      entry.fallbacks.forEach((f, i) => {
        if (f === name) return; // the cycle check below names it
        const target = models.get(f);
        if (!target) throw invalid(`no catalog model named ${f}`, `fallbacks.${i}`);
        if (!fits.includes(target.kind))
          throw invalid(
            `${f} is ${KIND_NAME[target.kind]}; ${KIND_NAME[entry.kind]} can only fall back to ${fits.map((k) => KIND_NAME[k]).join(' or ')}`,
            `fallbacks.${i}`,
          );
      });
      // A new kind must still suit the models that fall back to this one.
      const dependent = sorted.find(
        (m) => m.name !== name && m.fallbacks.includes(name) && !FALLBACK_KINDS[m.kind].includes(entry.kind),
      );
      if (dependent)
        throw invalid(
          `${dependent.name} (${KIND_NAME[dependent.kind]}) falls back to ${name}, so ${name} must stay ${FALLBACK_KINDS[dependent.kind].map((k) => KIND_NAME[k]).join(' or ')}; change its fallbacks first`,
          'kind',
        );
      const cycle = findCycle(name, (n) => (n === name ? entry.fallbacks : (models.get(n)?.fallbacks ?? [])));
      if (cycle) throw invalid(`fallback cycle ${cycle.join(' → ')}`, 'fallbacks');
      const backends: StoredBackend[] = entry.backends.map((b) =>
        b.endpoint !== undefined
          ? { endpoint: b.endpoint }
          : {
              baseUrl: b.baseUrl!.replace(/\/+$/, ''),
              model: b.model!,
              ...(b.apiKey !== undefined ? { secret: deps.sealer!.seal(b.apiKey, `model:${name}`) } : {}),
            },
      );
      const created = await deps.repo.put({
        name,
        kind: entry.kind,
        inputPerMTok: parseAmount(entry.pricing.inputPerMTok)!,
        outputPerMTok: parseAmount(entry.pricing.outputPerMTok)!,
        contextLength: entry.contextLength ?? null,
        fallbacks: entry.fallbacks,
        backends,
      });
      await changed();
      deps.logger.info(
        { model: name, kind: entry.kind, backends: backends.length, created },
        'catalog model written',
      );
      return created;
    },
    async delete(name) {
      const dependent = sorted.find((m) => m.fallbacks.includes(name));
      if (dependent)
        throw new ApiError('catalog_conflict', {
          message: `Catalog model ${dependent.name} falls back to ${name}; change its fallbacks first`,
        });
      const deleted = await deps.repo.delete(name);
      if (deleted) {
        await changed();
        deps.logger.info({ model: name }, 'catalog model deleted');
      }
      return deleted;
    },
    reload,
    close: async () => {},
  };
}

/** `{"models": {"<name>": <entry>, …}}` in JSON or YAML, as the Helm chart writes it. */
const modelsFile = z.object({ models: z.record(z.string(), z.unknown()) }).strict();

/**
 * Applies BERTH_MODELS_FILE: each entry is put (fallback targets first), so applying the same file
 * twice changes nothing. Entries not in the file are left alone (the admin API may own them).
 */
export async function applyModelsFile(catalog: ElasticCatalog, file: string): Promise<number> {
  let doc: unknown;
  try {
    doc = parseYaml(await readFile(file, 'utf8'));
  } catch (err) {
    throw new Error(`BERTH_MODELS_FILE=${file}: ${(err as Error).message}`);
  }
  const parsedDoc = modelsFile.safeParse(doc);
  if (!parsedDoc.success)
    throw new Error(`BERTH_MODELS_FILE=${file}: expected {"models": {"<display name>": <entry>, …}}`);
  const entries = new Map<string, EntryBody>();
  for (const [name, raw] of Object.entries(parsedDoc.data.models)) {
    try {
      entries.set(name, parse(entryBody, raw, `catalog entry ${name}`));
    } catch (err) {
      throw new Error(`BERTH_MODELS_FILE=${file}: ${(err as Error).message}`);
    }
  }
  const done = new Set<string>();
  const apply = async (name: string, depth = 0): Promise<void> => {
    if (done.has(name) || depth > entries.size) return;
    const entry = entries.get(name)!;
    for (const f of entry.fallbacks) if (entries.has(f) && f !== name) await apply(f, depth + 1);
    try {
      await catalog.put(name, entry);
    } catch (err) {
      throw new Error(`BERTH_MODELS_FILE=${file}: model ${name}: ${(err as Error).message}`);
    }
    done.add(name);
  };
  for (const name of entries.keys()) await apply(name);
  return entries.size;
}

/** NOTIFY/LISTEN between API replicas on PostgreSQL. */
export async function catalogNotifications(
  url: string,
  logger: Logger,
  onChange: () => void,
): Promise<{ notify(): Promise<void>; close(): Promise<void> }> {
  const listener: PgListener = await pgListener({
    url,
    applicationName: 'berth-catalog',
    channels: [CATALOG_CHANNEL],
    onNotification: () => onChange(),
    onLost: (err) => logger.warn({ err: err?.message }, 'catalog listener lost; reloading when it is back'),
    onReconnected: () => onChange(),
  });
  return {
    async notify() {
      // The write is committed: a replica that misses this reloads when its listener is back.
      await listener
        .query(`NOTIFY ${CATALOG_CHANNEL}`)
        .catch((err: unknown) => logger.warn({ err: (err as Error).message }, 'catalog NOTIFY failed'));
    },
    close: () => listener.close(),
  };
}
