// -o table|json|yaml: json and yaml print the API's objects as they are (stable for scripts); a
// table shows the columns a person reads. Colours only on a terminal (and never with NO_COLOR).
import { stringify } from 'yaml';

export type Format = 'table' | 'json' | 'yaml';
export const FORMATS: readonly Format[] = ['table', 'json', 'yaml'];

export const colour = (code: number, s: string, stream: NodeJS.WriteStream = process.stdout) =>
  stream.isTTY && !process.env.NO_COLOR ? `\x1b[${code}m${s}\x1b[0m` : s;

export function print(
  format: Format,
  value: unknown,
  columns?: Record<string, (row: never) => unknown>,
): void {
  if (format === 'json') return void process.stdout.write(JSON.stringify(value, null, 2) + '\n');
  if (format === 'yaml') return void process.stdout.write(stringify(value));
  const rows = (Array.isArray(value) ? value : [value]) as never[];
  if (!columns) return void process.stdout.write(stringify(value));
  const names = Object.keys(columns);
  const cells = rows.map((r) => names.map((n) => String(columns[n]!(r) ?? '')));
  const widths = names.map((n, i) => Math.max(n.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: string[]) =>
    c
      .map((v, i) => v.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  process.stdout.write(
    [colour(1, line(names.map((n) => n.toUpperCase()))), ...cells.map(line)].join('\n') + '\n',
  );
}

/** An amount as the API writes it ("0.800000"), for reading: trailing zeros dropped down to two decimals ("0.80"). */
export function money(amount: string, currency?: string | null): string {
  const short = amount.replace(/(\.\d{2}\d*?)0+$/, '$1');
  return currency ? `${short} ${currency}` : short;
}

export const yesNo = (v: boolean) => (v ? 'yes' : 'no');

/** An ISO 8601 time for a table, in the offset it is written with: "2026-11-23 03:00". */
export const when = (iso: string | null | undefined) => (iso ? iso.slice(0, 16).replace('T', ' ') : '');
