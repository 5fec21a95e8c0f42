// The hardware catalog as the dashboard shows it (GET /api/hardware): names for people, and the
// choice the create form starts from. Pure, so a unit test covers both shapes of the answer.
import type { Hardware } from './api.ts';

/** One option of the create form: an instance type and a GPU count, as `id|count`. */
export const choiceValue = (id: string, gpuCount: number): string => `${id}|${gpuCount}`;

/**
 * The price of one GPU for one hour in micro-units of the currency, when the API says it (a decimal
 * string such as "2.500000": money is compared exactly, never as a float). Older APIs do not.
 */
export function pricePerGpuHour(h: Hardware): bigint | undefined {
  const raw: unknown = (h as { pricePerGpuHour?: unknown }).pricePerGpuHour;
  const m = typeof raw === 'string' ? /^(\d{1,12})(?:\.(\d{1,6}))?$/.exec(raw.trim()) : null;
  return m ? BigInt(m[1]!) * 1_000_000n + BigInt((m[2] ?? '').padEnd(6, '0')) : undefined;
}

/**
 * The cheapest available option, the one the create form pre-selects, each type at its smallest GPU
 * count: by price when every available type has one, then by GPU memory (a smaller GPU is the
 * cheaper one in any catalog we know). Memory also decides between equal prices, which is what a
 * catalog without prices looks like (every type at "0.000000"). Undefined when nothing is available.
 */
export function cheapestChoice(hardware: readonly Hardware[]): string | undefined {
  const offered = hardware.filter((h) => h.available && h.allowedGpuCounts.length > 0);
  const byPrice = offered.every((h) => pricePerGpuHour(h) !== undefined);
  const cost = (h: Hardware, n: number): [bigint, number] => [
    byPrice ? pricePerGpuHour(h)! * BigInt(n) : 0n,
    h.gpuMemoryGiB * n,
  ];
  const cheaper = (a: [bigint, number], b: [bigint, number]) => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);
  let best: { h: Hardware; n: number } | undefined;
  for (const h of offered) {
    const n = Math.min(...h.allowedGpuCounts);
    if (!best || cheaper(cost(h, n), cost(best.h, best.n))) best = { h, n };
  }
  return best && choiceValue(best.h.id, best.n);
}

/** "NVIDIA H100 80GB" for `nvidia-h100-80gb`; the id itself for a type the catalog does not list. */
export function hardwareName(hardware: readonly Hardware[] | null, id: string): string {
  return hardware?.find((h) => h.id === id)?.displayName ?? id;
}
