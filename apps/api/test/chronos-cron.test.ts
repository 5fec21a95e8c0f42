// Chronos's next-fire computation: cron fields and aliases, validation messages, and daylight-saving
// changes in Europe/Berlin (2026-03-29 spring forward, 2026-10-25 fall back) and elsewhere.
import { describe, expect, it } from 'vitest';
import { isTimeZone, isoInZone, nextFires, parseCron } from '../src/chronos/cron.ts';

const fires = (expr: string, tz: string, after: string, n: number) => {
  const parsed = parseCron(expr);
  if (!parsed.ok) throw new Error(parsed.message);
  return nextFires(parsed.spec, tz, new Date(after), n).map((d) => isoInZone(d, tz));
};

describe('parseCron', () => {
  it.each([
    ['0 3 * * *', true],
    ['*/15 9-17 * * mon-fri', true],
    ['0 0 1,15 jan,jul *', true],
    ['@hourly', true],
    ['@DAILY', true],
    ['0 0 * * 7', true],
  ])('accepts %s', (expr, ok) => expect(parseCron(expr).ok).toBe(ok));

  it.each([
    [
      '* * * *',
      'must be a 5-field cron expression (minute hour day-of-month month day-of-week) or an alias such as @hourly; got 4 fields',
    ],
    [
      '* * * * * *',
      'must be a 5-field cron expression (minute hour day-of-month month day-of-week) or an alias such as @hourly; got 6 fields',
    ],
    ['60 * * * *', 'minute "60" is outside 0-59'],
    ['0 24 * * *', 'hour "24" is outside 0-23'],
    ['0 0 0 * *', 'day of month "0" is outside 1-31'],
    ['0 0 * 13 *', 'month "13" is outside 1-12'],
    ['0 0 * * 8', 'day of week "8" is outside 0-6'],
    ['x * * * *', 'minute "x" is not a number'],
    ['*/0 * * * *', 'minute step "*/0" must be at least 1'],
    ['@often', 'unknown alias; use one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly'],
  ])('refuses %s', (expr, message) => expect(parseCron(expr)).toEqual({ ok: false, message }));
});

describe('isTimeZone', () => {
  it('takes IANA names, not offsets or nonsense', () => {
    expect(isTimeZone('Europe/Berlin')).toBe(true);
    expect(isTimeZone('UTC')).toBe(true);
    expect(isTimeZone('America/Argentina/Buenos_Aires')).toBe(true);
    expect(isTimeZone('+01:00')).toBe(false);
    expect(isTimeZone('Mars/Olympus_Mons')).toBe(false);
    expect(isTimeZone('')).toBe(false);
  });
});

describe('nextFires in Europe/Berlin across daylight-saving changes', () => {
  it('a daily 03:00 keeps 03:00 local on both sides of spring forward', () => {
    expect(fires('0 3 * * *', 'Europe/Berlin', '2026-03-27T12:00:00Z', 4)).toEqual([
      '2026-03-28T03:00:00+01:00',
      '2026-03-29T03:00:00+02:00',
      '2026-03-30T03:00:00+02:00',
      '2026-03-31T03:00:00+02:00',
    ]);
  });

  it('02:30, which does not exist on 2026-03-29, fires once at 03:00 that day', () => {
    expect(fires('30 2 * * *', 'Europe/Berlin', '2026-03-27T12:00:00Z', 3)).toEqual([
      '2026-03-28T02:30:00+01:00',
      '2026-03-29T03:00:00+02:00',
      '2026-03-30T02:30:00+02:00',
    ]);
  });

  it('02:30, which happens twice on 2026-10-25, fires once (the first)', () => {
    expect(fires('30 2 * * *', 'Europe/Berlin', '2026-10-23T12:00:00Z', 3)).toEqual([
      '2026-10-24T02:30:00+02:00',
      '2026-10-25T02:30:00+02:00',
      '2026-10-26T02:30:00+01:00',
    ]);
    // In UTC: 24 h, then 25 h apart (the night the clocks go back is an hour longer).
    const parsed = parseCron('30 2 * * *');
    if (!parsed.ok) throw new Error();
    const at = nextFires(parsed.spec, 'Europe/Berlin', new Date('2026-10-23T12:00:00Z'), 3).map((d) =>
      d.toISOString(),
    );
    expect(at).toEqual(['2026-10-24T00:30:00.000Z', '2026-10-25T00:30:00.000Z', '2026-10-26T01:30:00.000Z']);
  });

  it('hourly stays hourly: 23 fires on the short day, 25 on the long one', () => {
    const count = (from: string, to: string) => {
      const parsed = parseCron('@hourly');
      if (!parsed.ok) throw new Error();
      return nextFires(parsed.spec, 'Europe/Berlin', new Date(from), 30).filter((d) => d < new Date(to))
        .length;
    };
    // Local midnight to midnight.
    expect(count('2026-03-28T22:59:59Z', '2026-03-29T22:00:00Z')).toBe(23);
    expect(count('2026-10-24T21:59:59Z', '2026-10-25T23:00:00Z')).toBe(25);
    expect(fires('0 * * * *', 'Europe/Berlin', '2026-10-25T00:30:00+02:00', 4)).toEqual([
      '2026-10-25T01:00:00+02:00',
      '2026-10-25T02:00:00+02:00',
      '2026-10-25T02:00:00+01:00',
      '2026-10-25T03:00:00+01:00',
    ]);
    expect(fires('0 * * * *', 'Europe/Berlin', '2026-03-29T00:30:00+01:00', 3)).toEqual([
      '2026-03-29T01:00:00+01:00',
      '2026-03-29T03:00:00+02:00',
      '2026-03-29T04:00:00+02:00',
    ]);
  });

  it('every 15 minutes through the repeated hour fires in both of its passes', () => {
    const f = fires('*/15 * * * *', 'Europe/Berlin', '2026-10-25T02:40:00+02:00', 3);
    expect(f).toEqual([
      '2026-10-25T02:45:00+02:00',
      '2026-10-25T02:00:00+01:00',
      '2026-10-25T02:15:00+01:00',
    ]);
  });
});

describe('nextFires elsewhere', () => {
  it('day of month OR day of week when both are restricted; AND with a star', () => {
    expect(fires('0 12 13 * fri', 'UTC', '2026-11-01T00:00:00Z', 3)).toEqual([
      '2026-11-06T12:00:00+00:00',
      '2026-11-13T12:00:00+00:00',
      '2026-11-20T12:00:00+00:00',
    ]);
    expect(fires('0 0 29 2 *', 'UTC', '2026-11-01T00:00:00Z', 2)).toEqual([
      '2028-02-29T00:00:00+00:00',
      '2032-02-29T00:00:00+00:00',
    ]);
  });

  it('a zone ahead of UTC (Asia/Tokyo) and one behind with a DST change (America/New_York)', () => {
    expect(fires('@daily', 'Asia/Tokyo', '2026-11-23T16:00:00Z', 2)).toEqual([
      '2026-11-25T00:00:00+09:00',
      '2026-11-26T00:00:00+09:00',
    ]);
    expect(fires('30 2 * * *', 'America/New_York', '2026-03-07T12:00:00Z', 3)).toEqual([
      '2026-03-08T03:00:00-04:00',
      '2026-03-09T02:30:00-04:00',
      '2026-03-10T02:30:00-04:00',
    ]);
  });

  it('a schedule that never fires gives nothing', () => {
    expect(fires('0 0 31 2 *', 'UTC', '2026-11-01T00:00:00Z', 1)).toEqual([]);
  });
});
