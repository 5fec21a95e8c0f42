// What every chaos suite shares: its knobs from the environment, the machine's load while it ran,
// and a Markdown table of figures for docs/reliability.md.
import { loadavg } from 'node:os';
import { kubectlOk } from '../cluster/env.ts';
import { percentile } from '../bench/stats.ts';
import { machine } from '../bench/stats.ts';

/** A whole-number knob: `CHAOS_<NAME>` from the environment, else the default. */
export function knob(name: string, fallback: number): number {
  const raw = process.env[`CHAOS_${name}`];
  const n = raw === undefined ? NaN : Number(raw);
  return Number.isFinite(n) && n >= 0 ? n : fallback;
}

export interface Figures {
  suite: string;
  /** What was done, in one line (counts as run). */
  setup: string;
  rows: [string, string | number][];
  /** True when the suite's guarantees held. */
  passed: boolean;
}

export function report(f: Figures, startedAt: number): string {
  const [l1, l5] = loadavg();
  const lines = [
    `### ${f.suite}: ${f.passed ? 'PASS' : 'FAIL'}`,
    '',
    f.setup,
    '',
    '| figure | value |',
    '|---|---|',
    ...f.rows.map(([k, v]) => `| ${k} | ${v} |`),
    `| duration | ${((Date.now() - startedAt) / 1000).toFixed(1)} s |`,
    `| machine | ${machine()}, load average ${l1!.toFixed(1)} (1 min) / ${l5!.toFixed(1)} (5 min) at the end |`,
  ];
  return lines.join('\n');
}

export function quantiles(samples: number[], unit = 'ms'): string {
  if (!samples.length) return 'n/a';
  const s = [...samples].sort((a, b) => a - b);
  const f = (x: number) => `${Math.round(x)} ${unit}`;
  return `p50 ${f(percentile(s, 50))}, p99 ${f(percentile(s, 99))}, max ${f(s.at(-1)!)} (n=${s.length})`;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Counts outcomes by label (`200`, `503`, `error:ECONNRESET`, …). */
export class Tally {
  readonly counts = new Map<string, number>();
  add(label: string | number): void {
    const k = String(label);
    this.counts.set(k, (this.counts.get(k) ?? 0) + 1);
  }
  get(label: string | number): number {
    return this.counts.get(String(label)) ?? 0;
  }
  get total(): number {
    let n = 0;
    for (const v of this.counts.values()) n += v;
    return n;
  }
  toString(): string {
    if (!this.counts.size) return 'none';
    return [...this.counts.entries()]
      .sort()
      .map(([k, v]) => `${k}: ${v}`)
      .join(', ');
  }
}

/** How many wakes the endpoint's Events record (`WakeRequested`, counting repeats of one Event). */
export async function wakeRequests(namespace: string, id: string): Promise<number> {
  const events = JSON.parse(
    await kubectlOk([
      'get',
      'events',
      '-n',
      namespace,
      '--field-selector',
      `involvedObject.name=${id}`,
      '-o',
      'json',
    ]),
  ) as { items: { reason: string; count?: number; series?: { count: number } }[] };
  return events.items
    .filter((e) => e.reason === 'WakeRequested')
    .reduce((n, e) => n + (e.series?.count ?? e.count ?? 1), 0);
}
