// Why a local engine process ended, from its exit and the tail of its output: the local counterpart
// of the operator's pod classification (OOMKilled / termination message / CrashLoopBackOff).
import type { WorkloadFailure } from '@berth/operator';

const OOM =
  /CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError|not enough (GPU )?memory|No available memory for the cache blocks/i;
const GATED =
  /GatedRepoError|Access to model .* is restricted|gated repo|401 Client Error|Cannot access gated repo|You are trying to access a gated repo/i;

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The last lines the process printed (stdout and stderr). */
  tail: string;
}

/** A failure that restarting will not fix, if the output says so. */
export function fatalExit(exit: Exit): WorkloadFailure | undefined {
  if (OOM.test(exit.tail))
    return {
      kind: 'OutOfMemory',
      message: `The engine ran out of memory loading the model (${describe(exit)}: ${lineMatching(exit.tail, OOM)}). Choose a larger GPU type, more GPUs, or a smaller maxModelLen.`,
    };
  if (GATED.test(exit.tail))
    return {
      kind: 'GatedModel',
      message: `The model is gated or private and the engine has no valid hub token (${describe(exit)}: ${lineMatching(exit.tail, GATED)}). Set HF_TOKEN for the API process and create the endpoint again.`,
    };
  return undefined;
}

/** The (last) output line that names the cause, bounded. */
function lineMatching(text: string, re: RegExp, max = 400): string {
  const line =
    text
      .split('\n')
      .findLast((l) => re.test(l))
      ?.trim() ?? '';
  return line.length > max ? `${line.slice(0, max)}…` : line;
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
