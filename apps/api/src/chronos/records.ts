// The records Chronos keeps — runs, executions and their step results — as the repositories and
// the executor share them (types only; the data access is in ./repository.ts and ./queue-repository.ts).
import type { Step } from './steps.ts';

export interface RunRecord {
  id: string;
  accountId: string;
  name: string;
  schedule: string;
  timezone: string;
  steps: Step[];
  keyId: string;
  nextFireAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

/** When the run's next fire's pre-warm is due (null: none); saved with the run. */
export type Prewarm = { prewarmAt: Date | null };

export type ExecutionStatus = 'queued' | 'running' | 'succeeded' | 'failed';

export interface StepResult {
  index: number;
  type: Step['type'];
  status: 'succeeded' | 'failed';
  /** The catalog model that answered (chat), or the MCP tool called (tool). */
  model?: string;
  tool?: string;
  /** A step on `auto`: the model Olympus chose and why (its x-berth-olympus-reason). */
  olympus?: { model: string; reason: string };
  output: string | null;
  error: string | null;
  /** Micro-units, as a decimal string of the integer (JSON has no bigint). */
  cost: string;
  startedAt: string;
  endedAt: string;
}

export interface ExecutionRecord {
  id: string;
  runId: string;
  accountId: string;
  trigger: 'schedule' | 'manual';
  scheduledFor: Date | null;
  status: ExecutionStatus;
  reason: string | null;
  steps: Step[];
  results: StepResult[];
  cost: bigint;
  attempts: number;
  worker: string | null;
  createdAt: Date;
  startedAt: Date | null;
  endedAt: Date | null;
}

/** An `auto` step 0 chosen by a manual trigger, handed to its execution in the job's data. */
export interface FirstChoice {
  model: string;
  fallbacks: string[];
  olympus: { model: string; reason: string };
}
