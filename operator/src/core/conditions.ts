import type { Condition, Phase } from '@berth/crds';

// The conditions GitOps tools read, derived from the phase alone (one table, no memory).
//
// - `Ready` (what `kubectl wait --for=condition=Ready` and kstatus' Ready rule read) is True when the
//   endpoint is settled and serving as asked: `up`, and also `hibernated`, which is scale-to-zero on
//   purpose (Knative keeps a scaled-to-zero Service Ready the same way; the next request wakes it).
// - `Reconciling` / `Stalled` follow the kstatus "abnormal-true" convention (Flux, kpt, the
//   cli-utils applier): Reconciling=True while replicas are being brought up (`building`,
//   `waking`) → InProgress; Stalled=True when the operator stopped trying (`failed`) → Failed, with
//   the failure's reason. Both are False otherwise, so `kubectl wait --for=condition=Stalled=False`
//   works too.
// - `Hibernated` and `Failed` say the same facts in words a kubectl user looks for.
// The Argo CD health check the chart ships reads `status.phase` and says the same (see
// charts/berth/files/argocd-health.lua).

export type ConditionType = 'Ready' | 'Reconciling' | 'Stalled' | 'Hibernated' | 'Failed';
export type PhaseCondition = Pick<Condition, 'type' | 'status' | 'reason' | 'message'>;

/** Which conditions are True in each phase; every other listed type is False. */
export const TRUE_CONDITIONS: Record<Phase, readonly ConditionType[]> = {
  building: ['Reconciling'],
  waking: ['Reconciling'],
  up: ['Ready'],
  hibernated: ['Ready', 'Hibernated'],
  failed: ['Stalled', 'Failed'],
};

export const CONDITION_TYPES: readonly ConditionType[] = [
  'Ready',
  'Reconciling',
  'Stalled',
  'Hibernated',
  'Failed',
];

/** A False condition's reason: the phase that makes it False (kstatus shows it next to the type). */
const FALSE_REASON: Record<Phase, string> = {
  building: 'Building',
  waking: 'Waking',
  up: 'Up',
  hibernated: 'Hibernated',
  failed: 'Failed',
};

/**
 * The conditions of an endpoint in `phase`: True ones carry the phase's reason and message
 * (`Stalled` thus names the failure, e.g. `ModelTooLarge`); False ones say which phase it is in.
 */
export function conditionsFor(phase: Phase, reason: string, message: string): PhaseCondition[] {
  const on = TRUE_CONDITIONS[phase];
  return CONDITION_TYPES.map((type) =>
    on.includes(type)
      ? { type, status: 'True', reason, message }
      : { type, status: 'False', reason: FALSE_REASON[phase], message: `Endpoint is ${phase}` },
  );
}
