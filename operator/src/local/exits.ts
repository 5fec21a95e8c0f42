// Why a local engine process ended, from its exit and the tail of its output: the local counterpart
// of the operator's pod classification (OOMKilled / termination message / CrashLoopBackOff).
import { failureInOutput } from '../core/failures.ts';
import type { WorkloadFailure } from '../core/types.ts';

/** How a user gives a local engine a hub token. */
const HUB_TOKEN_REMEDY = 'Set HF_TOKEN for the API process and create the endpoint again.';

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The last lines the process printed (stdout and stderr). */
  tail: string;
}

/** A failure that restarting will not fix, if the output says so. */
export function fatalExit(exit: Exit): WorkloadFailure | undefined {
  return failureInOutput(exit.tail, { where: describe(exit), hubTokenRemedy: HUB_TOKEN_REMEDY });
}

export function crashLoop(exit: Exit, restarts: number): WorkloadFailure {
  const out = lastLines(exit.tail);
  return {
    kind: 'CrashLoop',
    message: `The engine process keeps exiting (${restarts} restarts, ${describe(exit)}${out ? `: ${out}` : ''}).`,
  };
}

export function describe(exit: Pick<Exit, 'code' | 'signal'>): string {
  return exit.signal ? `killed by ${exit.signal}` : `exit code ${exit.code}`;
}

/** The last few non-empty lines, at most `max` characters. */
export function lastLines(text: string, lines = 5, max = 600): string {
  const kept = text
    .split('\n')
    .map((l) => l.trimEnd())
    .filter(Boolean)
    .slice(-lines)
    .join('\n');
  return kept.length > max ? `…${kept.slice(-max)}` : kept;
}
