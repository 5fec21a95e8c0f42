// No run missed or doubled when a replica dies, at the length CI affords: two API processes on a
// Chronos clock 20× real time, across America/New_York's skipped hour (2026-03-08) and
// Europe/Berlin's repeated hour (2026-10-25), five SIGKILLs each (half aimed just after a minute
// boundary, as that minute's fires are taken and recorded), every replica started again at once.
// Every occurrence up to the end has exactly one execution, none is extra, no model call is made
// twice for one execution, nothing is left queued or running. `npm run chaos -- chronos-kill` is
// the same at 100 kills (docs/reliability.md).
import { describe, expect, it } from 'vitest';
import { DST_SEGMENTS, killSegment } from '@berth/test/support/chronos-kill';

describe('Chronos with a replica killed at random moments', () => {
  it.each(DST_SEGMENTS.slice(0, 2))(
    '$zone, the $kind hour at $change: nothing missed, nothing twice',
    async (segment) => {
      const f = await killSegment({ ...segment, kills: 5 }, { speed: 20, everyMinute: 40 });
      console.error(
        `chronos kill ${segment.zone} ${segment.kind}: ${f.kills} kills (${f.aimedKills} aimed, ${f.killsInTransaction} inside a transaction), ${f.expected} occurrences, ${f.recorded} executions, ${f.interrupted} interrupted`,
      );
      expect({ missed: f.missed, doubled: f.doubled, extra: f.extra }).toEqual({
        missed: [],
        doubled: [],
        extra: [],
      });
      expect(f.recorded).toBe(f.expected);
      expect(f.otherFailures).toEqual([]);
      expect(f.stuck).toBe(0);
      expect(f.repeatedCalls).toBe(0);
      expect(f.expected).toBeGreaterThan(f.runs * 5);
    },
    240_000,
  );
});
