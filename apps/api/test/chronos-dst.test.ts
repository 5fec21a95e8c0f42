// Chronos's next fire on the daylight-saving days of America/New_York (2026-03-08 spring forward,
// 2026-11-01 fall back) and Europe/Berlin (2026-03-29, 2026-10-25): the skipped and the repeated
// hour, by hand for the rules docs/chronos.md states, then every schedule of a list from every
// 17 minutes of the two days around each change against a minute-by-minute reference that reads the
// wall clock from the runtime's time-zone data (the fast path of nextFire skips most look-ups).
import { describe, expect, it } from 'vitest';
import { isoInZone, nextFire, nextFires, parseCron, type CronSpec } from '../src/chronos/cron.ts';

const spec = (expr: string): CronSpec => {
  const parsed = parseCron(expr);
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.spec;
};
const fires = (expr: string, tz: string, after: string, n: number) =>
  nextFires(spec(expr), tz, new Date(after), n).map((d) => isoInZone(d, tz));
/** Fires in [from, to). */
const count = (expr: string, tz: string, from: string, to: string) =>
  nextFires(spec(expr), tz, new Date(from), 2_000).filter((d) => d < new Date(to)).length;

const NY = 'America/New_York';
const BERLIN = 'Europe/Berlin';

describe('the skipped hour (NY 2026-03-08, Berlin 2026-03-29) and the repeated hour (NY 2026-11-01, Berlin 2026-10-25)', () => {
  it.each([
    // A time in the skipped hour fires once, at the first instant after it, when the hour is fixed.
    ['30 2 * * *', NY, '2026-03-07T12:00:00Z', ['03-08T03:00:00-04:00', '03-09T02:30:00-04:00']],
    ['* 2 * * *', NY, '2026-03-08T06:00:00Z', ['03-08T03:00:00-04:00', '03-09T02:00:00-04:00']],
    ['* 2 * * *', BERLIN, '2026-03-29T00:00:00Z', ['03-29T03:00:00+02:00', '03-30T02:00:00+02:00']],
    // With * in the hour field the skipped times are simply absent.
    ['0 * * * *', NY, '2026-03-08T05:30:00Z', ['03-08T01:00:00-05:00', '03-08T03:00:00-04:00']],
    ['*/15 * * * *', NY, '2026-03-08T06:40:00Z', ['03-08T01:45:00-05:00', '03-08T03:00:00-04:00']],
    ['*/15 * * * *', BERLIN, '2026-03-29T00:40:00Z', ['03-29T01:45:00+01:00', '03-29T03:00:00+02:00']],
    // A time in the repeated hour fires once, at its first occurrence, when the hour is fixed.
    ['30 1 * * *', NY, '2026-10-31T12:00:00Z', ['11-01T01:30:00-04:00', '11-02T01:30:00-05:00']],
    ['*/20 1 * * *', NY, '2026-11-01T05:30:00Z', ['11-01T01:40:00-04:00', '11-02T01:00:00-05:00']],
    ['*/20 2 * * *', BERLIN, '2026-10-25T00:30:00Z', ['10-25T02:40:00+02:00', '10-26T02:00:00+01:00']],
    // With * in the hour field it fires in both passes.
    ['*/20 * * * *', NY, '2026-11-01T05:30:00Z', ['11-01T01:40:00-04:00', '11-01T01:00:00-05:00']],
    ['*/20 * * * *', BERLIN, '2026-10-25T00:30:00Z', ['10-25T02:40:00+02:00', '10-25T02:00:00+01:00']],
  ])('%s in %s after %s', (expr, tz, after, expected) => {
    expect(fires(expr, tz, after, expected.length)).toEqual(expected.map((e) => `2026-${e}`));
  });
});

describe('the length of the day in fires', () => {
  it.each([
    ['@hourly', NY, '2026-03-08T04:59:59Z', '2026-03-09T04:00:00Z', 23],
    ['* * * * *', NY, '2026-03-08T04:59:59Z', '2026-03-09T04:00:00Z', 23 * 60],
    ['@hourly', NY, '2026-11-01T03:59:59Z', '2026-11-02T05:00:00Z', 25],
    ['* * * * *', NY, '2026-11-01T03:59:59Z', '2026-11-02T05:00:00Z', 25 * 60],
    ['* * * * *', BERLIN, '2026-03-28T22:59:59Z', '2026-03-29T22:00:00Z', 23 * 60],
    ['* * * * *', BERLIN, '2026-10-24T21:59:59Z', '2026-10-25T23:00:00Z', 25 * 60],
  ])('%s in %s from local midnight %s: %i', (expr, tz, from, to, n) => {
    expect(count(expr, tz, from, to)).toBe(n);
  });
});

/**
 * The reference: minute by minute from `after`, the wall clock read from Intl. A minute fires when
 * its wall time matches; with a fixed hour, not in the second pass of a repeated hour, and once at
 * the first minute after a gap in which a matching wall time was skipped.
 */
const walls = new Map<string, number>();

function referenceNext(s: CronSpec, tz: string, after: number, horizonMinutes: number): number | undefined {
  // Swedish dates read as ISO ("2026-03-08 03:00"): another way to the wall clock than nextFire's.
  const format = new Intl.DateTimeFormat('sv-SE', { timeZone: tz, dateStyle: 'short', timeStyle: 'short' });
  const wall = (t: number) => {
    const key = `${tz}@${t}`;
    let w = walls.get(key);
    if (w === undefined) {
      const [y, mo, d, h, mi] = format.format(new Date(t)).split(/\D+/).map(Number);
      w = Date.UTC(y!, mo! - 1, d!, h!, mi!);
      walls.set(key, w);
    }
    return w;
  };
  const matches = (w: number) => {
    const d = new Date(w);
    if (!s.minutes.includes(d.getUTCMinutes()) || !s.hours.includes(d.getUTCHours())) return false;
    if (!s.months.has(d.getUTCMonth() + 1)) return false;
    const dom = s.days.has(d.getUTCDate());
    const dow = s.weekdays.has(d.getUTCDay());
    return s.dayStar || s.weekdayStar ? dom && dow : dom || dow;
  };
  const M = 60_000;
  const first = Math.floor(after / M) * M + M;
  for (let t = first; t < first + horizonMinutes * M; t += M) {
    const w = wall(t);
    const previous = wall(t - M);
    let fires = matches(w);
    if (fires && !s.hourStar)
      for (let back = t - M; back >= t - 120 * M; back -= M) if (wall(back) === w) fires = false;
    if (!fires && !s.hourStar && w - previous > M)
      for (let v = previous + M; v < w; v += M) if (matches(v)) fires = true;
    if (fires) return t;
  }
  return undefined;
}

describe('nextFire against the minute-by-minute reference, around each change', () => {
  const SCHEDULES = [
    '* * * * *',
    '*/7 * * * *',
    '0 * * * *',
    '30 2 * * *',
    '* 2 * * *',
    '*/20 1 * * *',
    '15,45 1-3 * * *',
    '59 1 * * *',
    '0 3 * * *',
    '0 2 * * 0',
  ];
  const CHANGES: [string, string][] = [
    ['America/New_York', '2026-03-08T07:00:00Z'],
    ['America/New_York', '2026-11-01T06:00:00Z'],
    ['Europe/Berlin', '2026-03-29T01:00:00Z'],
    ['Europe/Berlin', '2026-10-25T01:00:00Z'],
  ];
  it.each(CHANGES)('%s, the change at %s', (tz, change) => {
    const at = Date.parse(change);
    let compared = 0;
    for (const expr of SCHEDULES) {
      const s = spec(expr);
      for (let after = at - 86_400_000; after <= at + 86_400_000; after += 17 * 60_000) {
        const expected = referenceNext(s, tz, after, 26 * 60);
        if (expected === undefined) continue; // beyond the reference's horizon
        const got = nextFire(s, tz, new Date(after))?.getTime();
        expect({
          expr,
          after: new Date(after).toISOString(),
          got: got && new Date(got).toISOString(),
        }).toEqual({ expr, after: new Date(after).toISOString(), got: new Date(expected).toISOString() });
        compared++;
      }
    }
    expect(compared).toBeGreaterThan(1_000);
  });
});
