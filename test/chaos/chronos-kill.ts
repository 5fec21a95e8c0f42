// `npm run chaos -- chronos-kill`: Chronos with a replica SIGKILLed CHAOS_KILLS times (default 100,
// spread over the four daylight-saving changes of 2026 in America/New_York and Europe/Berlin), two
// API processes on a Chronos clock CHAOS_CHRONOS_SPEED × real time (20), CHAOS_CHRONOS_RUNS runs
// firing every minute (100) besides the ones in the changed hour. Half the kills are aimed at the
// replica holding a minute's fire transaction. Passes when no occurrence was missed, recorded twice
// or made up, no execution called its model twice, and nothing was left queued or running
// (test/support/chronos-kill.ts; the CI-length test is apps/api/test/chronos-kill.int.test.ts).
// CHAOS_CHRONOS_CHANGES runs some of the changes only, the kills split over them: comma-separated
// zones (`America/New_York`: both of its changes) or a zone and a change's date or kind
// (`America/New_York:2026-03-08`, `Europe/Berlin:repeated`). Every execution that failed for a
// reason other than `Interrupted` is printed (the first 40: due time, when it was recorded, started
// and ended, its worker), then each distinct reason with its count.
import {
  failureReasons,
  held,
  killSegment,
  selectSegments,
  type SegmentFigures,
} from '../support/chronos-kill.ts';
import { knob, quantiles, report } from './lib.ts';

export async function chronosKill(): Promise<{ text: string; passed: boolean }> {
  const started = Date.now();
  const kills = knob('KILLS', 100);
  const speed = knob('CHRONOS_SPEED', 20);
  const everyMinute = knob('CHRONOS_RUNS', 100);
  const segments = selectSegments(process.env.CHAOS_CHRONOS_CHANGES);
  const figures: SegmentFigures[] = [];
  for (const [i, segment] of segments.entries()) {
    const share = Math.floor(kills / segments.length) + (i < kills % segments.length ? 1 : 0);
    const f = await killSegment(
      { ...segment, kills: share },
      { speed, everyMinute, log: (line) => process.stderr.write(line + '\n') },
    );
    figures.push(f);
    // Each change's figures as it ends, so a run stopped part-way still leaves them.
    for (const line of f.otherFailureDetails.slice(0, 40))
      process.stderr.write(`  failed otherwise: ${line}\n`);
    if (f.otherFailureDetails.length > 40)
      process.stderr.write(`  … and ${f.otherFailureDetails.length - 40} more failed otherwise\n`);
    process.stderr.write(
      `${segment.zone} ${segment.kind}: ${held(f) ? 'held' : 'FAILED'} — ${f.expected} due, ${f.recorded} recorded, missed ${f.missed.length}, twice ${f.doubled.length}, extra ${f.extra.length}, repeated model calls ${f.repeatedCalls}, ${f.kills} kills (${f.aimedKills} aimed, ${f.killsInTransaction} in a transaction), ${f.interrupted} interrupted, ${f.otherFailures.length} failed otherwise, ${f.stuck} left; ${((Date.now() - started) / 60_000).toFixed(1)} min so far\n`,
    );
    for (const [reason, n] of failureReasons(f.otherFailures)) process.stderr.write(`  ${n}× ${reason}\n`);
  }
  const sum = (f: (x: SegmentFigures) => number) => figures.reduce((n, x) => n + f(x), 0);
  const list = (f: (x: SegmentFigures) => string[]) => {
    const all = figures.flatMap(f);
    return all.length ? `${all.length}: ${all.slice(0, 5).join('; ')}${all.length > 5 ? '; …' : ''}` : '0';
  };
  const passed = figures.every(held);
  const text = report(
    {
      suite: 'Chronos with replicas killed at random moments',
      setup: `Two API processes on one PostgreSQL database, Chronos on a clock ${speed}× real time; per daylight-saving change (${segments.map((s) => `${s.zone} ${s.change.slice(0, 10)}, ${s.kind} hour ${s.hour}`).join('; ')}), ${everyMinute} runs every minute and five in or around the changed hour, one chat step each. ${kills} SIGKILLs in all, each replica started again at once; every other kill aimed at the replica holding a minute's fire transaction.`,
      rows: [
        [
          'kills (aimed at the fire transaction holder / inside a transaction)',
          `${sum((f) => f.kills)} (${sum((f) => f.aimedKills)} / ${sum((f) => f.killsInTransaction)})`,
        ],
        ['occurrences due / executions recorded', `${sum((f) => f.expected)} / ${sum((f) => f.recorded)}`],
        ...figures.map((f): [string, string] => [
          `${f.segment.zone} ${f.segment.change.slice(0, 10)} (${f.segment.kind} hour)`,
          `${f.expected} due, ${f.recorded} recorded, ${f.kills} kills (${f.aimedKills} aimed, ${f.killsInTransaction} in a transaction), ${f.interrupted} interrupted; Chronos time ${f.fakeSpan}`,
        ]),
        ['occurrences missed', list((f) => f.missed)],
        ['occurrences recorded twice', list((f) => f.doubled)],
        ['executions for no occurrence', list((f) => f.extra)],
        ['model calls made twice for one execution', sum((f) => f.repeatedCalls)],
        [
          'executions interrupted (their replica killed mid-step; failed, not resumed)',
          sum((f) => f.interrupted),
        ],
        [
          'executions failed otherwise (by reason)',
          failureReasons(figures.flatMap((f) => f.otherFailures))
            .map(([reason, n]) => `${n}× ${reason}`)
            .join('; ') || '0',
        ],
        ['executions left queued or running', sum((f) => f.stuck)],
        ['fire recorded after its due time (real time)', quantiles(figures.flatMap((f) => f.fireDelaysMs))],
      ],
      passed,
    },
    started,
  );
  return { text, passed };
}
