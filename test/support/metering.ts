// What billing recorded for an account, as tests compare it with the engines: the usage rows (per key,
// model and minute, summed per model here) and the ledger's charge entries.
import { sql } from './postgres.ts';

export interface ModelUsage {
  model: string;
  requests: number;
  prompt: string;
  completion: string;
  cost: string;
}

/** metered_usage summed per model (tokens and cost as decimal strings), by model name. */
export function usageByModel(url: string, accountId: string): Promise<ModelUsage[]> {
  return sql<ModelUsage>(
    url,
    `SELECT model, sum(requests)::int AS requests, sum(prompt_tokens)::text AS prompt,
       sum(completion_tokens)::text AS completion, sum(cost)::text AS cost
     FROM metered_usage WHERE account_id = $1 GROUP BY model ORDER BY model`,
    [accountId],
  );
}

/** The account's charge entries, oldest first (negative micro-units). */
export async function chargeEntries(url: string, accountId: string): Promise<bigint[]> {
  const rows = await sql<{ amount: string }>(
    url,
    `SELECT amount::text FROM ledger_entries WHERE account_id = $1 AND kind = 'charge' ORDER BY id`,
    [accountId],
  );
  return rows.map((r) => BigInt(r.amount));
}

/** An engine's own counters, as vLLM names them on /metrics. */
export interface Counters {
  prompt: number;
  generation: number;
}

/** `vllm:prompt_tokens_total` and `vllm:generation_tokens_total` of the engine at `url`. */
export async function counters(url: string): Promise<Counters> {
  const text = await (await fetch(url + '/metrics')).text();
  const read = (name: string) =>
    Number(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return { prompt: read('vllm:prompt_tokens_total'), generation: read('vllm:generation_tokens_total') };
}

/** What engines counted between two readings, summed. */
export function delta(before: readonly Counters[], after: readonly Counters[]): Counters {
  return after.reduce(
    (s, a, i) => ({
      prompt: s.prompt + a.prompt - before[i]!.prompt,
      generation: s.generation + a.generation - before[i]!.generation,
    }),
    { prompt: 0, generation: 0 },
  );
}

/** What billing recorded for an account (or some of its models, and its dedicated endpoints). */
export interface Records {
  tokens: Counters;
  usageCost: bigint;
  /** The account's charge entries, summed (positive). */
  charged: bigint;
}

export async function records(
  url: string,
  accountId: string,
  o: { model?: string; notModel?: string; endpoints?: boolean },
): Promise<Records> {
  const filter = o.model ? ' AND model = $2' : o.notModel ? ' AND model <> $2' : '';
  const args = o.model ? [accountId, o.model] : o.notModel ? [accountId, o.notModel] : [accountId];
  const [u] = await sql<{ p: string; c: string; cost: string }>(
    url,
    `SELECT COALESCE(sum(prompt_tokens), 0)::text AS p, COALESCE(sum(completion_tokens), 0)::text AS c,
       COALESCE(sum(cost), 0)::text AS cost FROM metered_usage WHERE account_id = $1${filter}`,
    args,
  );
  const [d] =
    o.endpoints || (!o.model && !o.notModel)
      ? await sql<{ p: string; c: string }>(
          url,
          `SELECT COALESCE(sum(prompt_tokens), 0)::text AS p, COALESCE(sum(completion_tokens), 0)::text AS c
           FROM endpoint_usage WHERE account_id = $1`,
          [accountId],
        )
      : [{ p: '0', c: '0' }];
  const [charged] = await sql<{ s: string }>(
    url,
    `SELECT COALESCE(-sum(amount), 0)::text AS s FROM ledger_entries WHERE account_id = $1 AND kind = 'charge'`,
    [accountId],
  );
  return {
    tokens: { prompt: Number(u!.p) + Number(d!.p), generation: Number(u!.c) + Number(d!.c) },
    usageCost: BigInt(u!.cost),
    charged: BigInt(charged!.s),
  };
}

/** `after − before`, field by field. */
export function minus(after: Records, before: Records): Records {
  return {
    tokens: {
      prompt: after.tokens.prompt - before.tokens.prompt,
      generation: after.tokens.generation - before.tokens.generation,
    },
    usageCost: after.usageCost - before.usageCost,
    charged: after.charged - before.charged,
  };
}
