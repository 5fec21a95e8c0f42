import type { WorkloadFailure, WorkloadFailureKind } from './types.ts';

// What an engine failure means, for every runtime (pods on Kubernetes, processes in local mode): the
// output that names a cause restarting will not fix, the text that tells a user what to do about it,
// and which failure an endpoint reports when its replicas show several.

const OUT_OF_MEMORY =
  /CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError|not enough (GPU )?memory|No available memory for the cache blocks/i;
const GATED =
  /GatedRepoError|Access to model .* is restricted|gated repo|401 Client Error|Cannot access gated repo|You are trying to access a gated repo/i;

/** Most severe first. */
export const FAILURE_SEVERITY: readonly WorkloadFailureKind[] = [
  'ImagePull',
  'OutOfMemory',
  'GatedModel',
  'CrashLoop',
  'Unschedulable',
];

/** The failure an endpoint reports when its replicas show several. */
export function mostSevere(failures: readonly WorkloadFailure[]): WorkloadFailure | undefined {
  let worst: WorkloadFailure | undefined;
  for (const f of failures)
    if (!worst || FAILURE_SEVERITY.indexOf(f.kind) < FAILURE_SEVERITY.indexOf(worst.kind)) worst = f;
  return worst;
}

export interface FailureContext {
  /** Which replica and how it ended, e.g. `pod p-1` or `exit code 1`. */
  where: string;
  /** How a user of this runtime gives the engine a hub token (the runtimes differ). */
  hubTokenRemedy: string;
}

export function outOfMemory(where: string, cause: string): WorkloadFailure {
  return {
    kind: 'OutOfMemory',
    message: `The engine ran out of memory loading the model (${where}: ${cause}). Choose a larger GPU type, more GPUs, or a smaller maxModelLen.`,
  };
}

/** The failure an engine's last output names, if restarting will not fix it. */
export function failureInOutput(output: string, ctx: FailureContext): WorkloadFailure | undefined {
  if (OUT_OF_MEMORY.test(output)) return outOfMemory(ctx.where, lineMatching(output, OUT_OF_MEMORY));
  if (GATED.test(output))
    return {
      kind: 'GatedModel',
      message: `The model is gated or private and the engine has no valid hub token (${ctx.where}: ${lineMatching(output, GATED)}). ${ctx.hubTokenRemedy}`,
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
