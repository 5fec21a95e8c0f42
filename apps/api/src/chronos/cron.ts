// Chronos schedules: a 5-field cron expression (or an @hourly-style alias) read in an IANA time zone,
// and the instants it fires at. Pure functions of (expression, zone, instant), table-tested across
// daylight-saving changes (test/chronos-cron.test.ts).
//
// Daylight saving follows Vixie cron, the behaviour cron users expect:
// - a wall-clock time that does not exist (spring forward, e.g. 02:30 on 2026-03-29 in
//   Europe/Berlin) fires once, at the first instant after the gap (03:00 local), when the hour field
//   is fixed; with `*` in the hour field those minutes are simply not there (hourly stays hourly);
// - a wall-clock time that happens twice (fall back, 02:30 on 2026-10-25) fires once, at its first
//   occurrence, when the hour field is fixed; with `*` in the hour field it fires at both (so an
//   hourly schedule still fires every hour).

export const ALIASES: Record<string, string> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
};

export interface CronSpec {
  minutes: readonly number[];
  hours: readonly number[];
  days: ReadonlySet<number>;
  months: ReadonlySet<number>;
  weekdays: ReadonlySet<number>;
  /** The field starts with `*` (cron's rule for combining day of month and day of week). */
  dayStar: boolean;
  weekdayStar: boolean;
  hourStar: boolean;
}

const MONTH_NAMES = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
const DAY_NAMES = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];

const FIELDS = [
  { name: 'minute', min: 0, max: 59 },
  { name: 'hour', min: 0, max: 23 },
  { name: 'day of month', min: 1, max: 31 },
  { name: 'month', min: 1, max: 12, names: MONTH_NAMES, base: 1 },
  { name: 'day of week', min: 0, max: 7, names: DAY_NAMES, base: 0 },
] as const;

type Field = (typeof FIELDS)[number];

function parseField(text: string, f: Field): number[] | string {
  const out = new Set<number>();
  const value = (s: string): number | undefined => {
    if (/^\d+$/.test(s)) return Number(s);
    const names = 'names' in f ? (f.names as readonly string[]) : undefined;
    const i = names?.indexOf(s.toLowerCase()) ?? -1;
    return i >= 0 ? i + ('base' in f ? f.base : 0) : undefined;
  };
  for (const part of text.split(',')) {
    const m = /^(\*|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)?)(?:\/(\d+))?$/.exec(part);
    if (!m) return `${f.name} "${part}" is not a value, range, list or step`;
    let lo: number;
    let hi: number;
    if (m[1] === '*') {
      lo = f.min;
      hi = f.max === 7 ? 6 : f.max;
    } else {
      const [a, b] = m[1]!.split('-');
      const va = value(a!);
      const vb = b === undefined ? undefined : value(b);
      if (va === undefined || (b !== undefined && vb === undefined))
        return `${f.name} "${part}" is not a number${'names' in f ? ' or name' : ''}`;
      lo = va;
      hi = vb ?? (m[2] ? (f.max === 7 ? 6 : f.max) : va);
    }
    if (lo < f.min || hi > f.max || lo > hi)
      return `${f.name} "${part}" is outside ${f.min}-${f.max === 7 ? 6 : f.max}`;
    const step = m[2] ? Number(m[2]) : 1;
    if (step < 1) return `${f.name} step "${part}" must be at least 1`;
    for (let v = lo; v <= hi; v += step) out.add(f.max === 7 && v === 7 ? 0 : v);
  }
  return [...out].sort((a, b) => a - b);
}

/** The schedule, or what is wrong with it (one sentence naming the field). */
export function parseCron(expression: string): { ok: true; spec: CronSpec } | { ok: false; message: string } {
  const text = ALIASES[expression.trim().toLowerCase()] ?? expression.trim();
  if (text.startsWith('@'))
    return { ok: false, message: `unknown alias; use one of ${Object.keys(ALIASES).join(', ')}` };
  const parts = text.split(/\s+/);
  if (parts.length !== 5)
    return {
      ok: false,
      message: `must be a 5-field cron expression (minute hour day-of-month month day-of-week) or an alias such as @hourly; got ${parts.length} fields`,
    };
  const values: number[][] = [];
  for (const [i, f] of FIELDS.entries()) {
    const v = parseField(parts[i]!, f);
    if (typeof v === 'string') return { ok: false, message: v };
    values.push(v);
  }
  return {
    ok: true,
    spec: {
      minutes: values[0]!,
      hours: values[1]!,
      days: new Set(values[2]),
      months: new Set(values[3]),
      weekdays: new Set(values[4]),
      hourStar: parts[1]!.startsWith('*'),
      dayStar: parts[2]!.startsWith('*'),
      weekdayStar: parts[4]!.startsWith('*'),
    },
  };
}

const formatters = new Map<string, Intl.DateTimeFormat>();
function formatter(tz: string): Intl.DateTimeFormat {
  let f = formatters.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: tz,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    formatters.set(tz, f);
  }
  return f;
}

/** An IANA zone name this runtime knows (`Europe/Berlin`, `UTC`); not an offset such as `+01:00`. */
export function isTimeZone(tz: string): boolean {
  if (!/^[A-Za-z][A-Za-z0-9_+-]*(\/[A-Za-z0-9_+-]+)*$/.test(tz) || tz.length > 64) return false;
  try {
    formatter(tz);
    return true;
  } catch {
    return false;
  }
}

/** The wall-clock time in `tz` at instant `t`, as epoch milliseconds of the same fields in UTC. */
function wallOf(tz: string, t: number): number {
  const p: Record<string, number> = {};
  for (const x of formatter(tz).formatToParts(new Date(t)))
    if (x.type !== 'literal') p[x.type] = Number(x.value);
  return Date.UTC(p.year!, p.month! - 1, p.day!, p.hour!, p.minute!, p.second!);
}

/** Local time minus UTC at instant `t`, in milliseconds. */
function offsetAt(tz: string, t: number): number {
  const s = Math.floor(t / 1000) * 1000;
  return wallOf(tz, s) - s;
}

const DAY = 86_400_000;
const HOUR = 3_600_000;
const MINUTE = 60_000;

/**
 * The instants at which wall-clock time `wall` (epoch ms of its fields in UTC) happens in `tz`: one,
 * two (fall back), or none — then `gapEnd` is the first instant after the gap.
 */
function resolveWall(tz: string, wall: number): { instants: number[] } | { gapEnd: number } {
  const before = offsetAt(tz, wall - DAY);
  const after = offsetAt(tz, wall + DAY);
  const instants = [...new Set([wall - before, wall - after])]
    .filter((t) => wallOf(tz, t) === wall)
    .sort((a, b) => a - b);
  if (instants.length) return { instants };
  // In a gap: wall - after is before the change, wall - before after it. Find the change's minute.
  let lo = wall - after;
  let hi = wall - before;
  while (hi - lo > MINUTE) {
    const mid = lo + Math.floor((hi - lo) / 2 / MINUTE) * MINUTE;
    if (offsetAt(tz, mid) === after) hi = mid;
    else lo = mid;
  }
  return { gapEnd: hi };
}

function dayMatches(spec: CronSpec, date: Date): boolean {
  if (!spec.months.has(date.getUTCMonth() + 1)) return false;
  const dom = spec.days.has(date.getUTCDate());
  const dow = spec.weekdays.has(date.getUTCDay());
  if (spec.dayStar || spec.weekdayStar) return dom && dow;
  return dom || dow;
}

/** How far ahead a schedule is searched: 29 February needs up to 8 years (2096 → 2104). */
const HORIZON_DAYS = 366 * 9;

/**
 * The first instant strictly after `after` at which the schedule fires in `tz`; undefined: never.
 *
 * A wall-clock time `w` happens at the instant `w − offset`. Over the two days after `after` the
 * zone's offset is `off0` (its offset then) or, past a change, `offAfter` (resolveWall's own
 * assumption: at most one change within a day of any time). So a `w` at or before
 * `after + min(off0, offAfter)` happens before `after`; with no change within a day before and two
 * days after, `w − off0` is the one instant of a `w` in the next day; and once the best instant is
 * found no later `w` can beat it (without a fall-back ahead, later wall times happen later; with one,
 * `w − max(…)` must be before it). Wall times are resolved with time-zone look-ups only where a
 * change is near: an every-minute schedule costs four look-ups, so 1,000 runs due in the same minute
 * get their next fires in milliseconds (tested against a minute-by-minute reference in
 * test/chronos-dst.test.ts).
 */
export function nextFire(spec: CronSpec, tz: string, after: Date): Date | undefined {
  const t0 = after.getTime();
  const startWall = wallOf(tz, t0);
  const off0 = startWall - t0;
  const offAfter = offsetAt(tz, t0 + 2 * DAY);
  // A wall time just ahead may have happened already, before a fall-back in the last day.
  const settled = offsetAt(tz, t0 - DAY) === off0 && offAfter === off0;
  const lo = Math.min(off0, offAfter);
  const hi = Math.max(off0, offAfter);
  const fallBack = offAfter < off0;
  /** Instants up to here have the offsets above; past it, walls are resolved and pruned as before. */
  const nearEnd = t0 + DAY;
  const firstDay = Math.floor(startWall / DAY) * DAY - DAY; // the day before: zones ahead of UTC
  for (let d = 0; d < HORIZON_DAYS; d++) {
    const day = firstDay + d * DAY;
    if (!dayMatches(spec, new Date(day))) continue;
    let best: number | undefined;
    let bestWall = 0;
    hours: for (const h of spec.hours) {
      for (const m of spec.minutes) {
        const wall = day + h * HOUR + m * MINUTE;
        if (wall <= t0 + lo) continue; // before `after` whatever the offset
        // No later wall time can beat the best found: without a fall-back ahead, later wall times
        // happen later; with one, not before `w − hi`.
        if (
          best !== undefined &&
          (best <= nearEnd ? !fallBack || wall - hi >= best : wall > bestWall + 3 * HOUR)
        )
          break hours;
        let fires: number[];
        if (settled && wall - lo <= nearEnd) fires = [wall - lo];
        else {
          const r = resolveWall(tz, wall);
          fires =
            'gapEnd' in r ? (spec.hourStar ? [] : [r.gapEnd]) : spec.hourStar ? r.instants : [r.instants[0]!];
        }
        for (const t of fires)
          if (t > t0 && (best === undefined || t < best)) {
            best = t;
            bestWall = wall;
          }
      }
    }
    if (best !== undefined) return new Date(best);
  }
  return undefined;
}

/** The next `n` fire instants after `after`. */
export function nextFires(spec: CronSpec, tz: string, after: Date, n: number): Date[] {
  const out: Date[] = [];
  let t = after;
  while (out.length < n) {
    const next = nextFire(spec, tz, t);
    if (!next) break;
    out.push(next);
    t = next;
  }
  return out;
}

/** ISO 8601 with the zone's offset at that instant: `2026-03-29T03:00:00+02:00`. */
export function isoInZone(t: Date, tz: string): string {
  const s = Math.floor(t.getTime() / 1000) * 1000;
  const wall = wallOf(tz, s);
  const offsetMin = Math.round((wall - s) / MINUTE);
  const sign = offsetMin < 0 ? '-' : '+';
  const abs = Math.abs(offsetMin);
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${new Date(wall).toISOString().slice(0, 19)}${sign}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
}
