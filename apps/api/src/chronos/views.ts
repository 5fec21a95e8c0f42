// What the Chronos routes show: a run (with its next fire times) and an execution (with each step's
// outcome and cost).
import { z } from 'zod';
import { formatAmount } from '../platform/money.ts';
import { isoInZone, nextFires, parseCron } from './cron.ts';
import type { ExecutionRecord, RunRecord } from './repository.ts';
import { stepSchema } from './steps.ts';

const NEXT_SHOWN = 5;

export const runView = z.object({
  id: z.string().describe('`chr_…`'),
  name: z.string(),
  schedule: z.string(),
  timezone: z.string(),
  steps: z.array(stepSchema),
  next_fire_at: z
    .string()
    .nullable()
    .describe('ISO 8601 with the offset of `timezone`; null: the schedule never fires again'),
  next_fires: z.array(z.string()).describe(`The next ${NEXT_SHOWN} fire times, ISO 8601 with offset`),
  key_id: z
    .string()
    .describe(
      'The key that created the run (`session`: the dashboard); its executions’ usage is recorded under it. The run belongs to the account: revoking this key does not stop it (delete the run to stop it)',
    ),
  created_at: z.string(),
  updated_at: z.string(),
});

const stepResultView = z.object({
  index: z.number().int(),
  type: z.enum(['chat', 'tool']),
  status: z.enum(['succeeded', 'failed']),
  model: z.string().optional().describe('The catalog model that answered (chat)'),
  tool: z.string().optional().describe('The MCP tool called (tool)'),
  olympus: z
    .object({
      model: z.string().describe('The catalog model Olympus chose'),
      reason: z
        .string()
        .describe(
          'Why, as `x-berth-olympus-reason` says it on a live call: `route:<name>`, `cheapest`, `fastest`, `best` or `fallback`',
        ),
    })
    .optional()
    .describe(
      'A chat step on `auto`: Olympus’s choice, made as for a live request with the same messages (when `model` differs, the chosen model was over capacity and a next choice answered)',
    ),
  output: z.string().nullable(),
  error: z.string().nullable(),
  cost: z.string().describe('Decimal string in the billing currency'),
  started_at: z.string(),
  ended_at: z.string(),
});

export const executionView = z.object({
  id: z.string().describe('`chx_…`'),
  run_id: z.string(),
  trigger: z.enum(['schedule', 'manual']),
  scheduled_for: z.string().nullable().describe('The occurrence it fired for (ISO 8601 with offset)'),
  status: z.enum(['queued', 'running', 'succeeded', 'failed']),
  reason: z.string().nullable().describe('Why it failed'),
  cost: z.string().describe('Run fee plus its steps, decimal string'),
  fee: z
    .string()
    .describe(
      'The run fee charged (decimal string): the fee once a step reached a model or a tool, "0.000000" when the execution failed on Berth’s side before that (never billed; `reason` says so)',
    ),
  attempts: z.number().int().describe('More than 1: the replica of an earlier attempt died'),
  steps: z.array(stepResultView),
  created_at: z.string(),
  started_at: z.string().nullable(),
  ended_at: z.string().nullable(),
});

export function viewRun(r: RunRecord, now: Date): z.infer<typeof runView> {
  const parsed = parseCron(r.schedule);
  return {
    id: r.id,
    name: r.name,
    schedule: r.schedule,
    timezone: r.timezone,
    steps: r.steps,
    next_fire_at: r.nextFireAt ? isoInZone(r.nextFireAt, r.timezone) : null,
    next_fires: parsed.ok
      ? nextFires(parsed.spec, r.timezone, now, NEXT_SHOWN).map((d) => isoInZone(d, r.timezone))
      : [],
    key_id: r.keyId,
    created_at: r.createdAt.toISOString(),
    updated_at: r.updatedAt.toISOString(),
  };
}

export function viewExecution(e: ExecutionRecord, timezone: string): z.infer<typeof executionView> {
  return {
    id: e.id,
    run_id: e.runId,
    trigger: e.trigger,
    scheduled_for: e.scheduledFor ? isoInZone(e.scheduledFor, timezone) : null,
    status: e.status,
    reason: e.reason,
    cost: formatAmount(e.cost),
    fee: formatAmount(e.cost - e.results.reduce((sum, r) => sum + BigInt(r.cost), 0n)),
    attempts: e.attempts,
    steps: e.results.map((s) => ({
      index: s.index,
      type: s.type,
      status: s.status,
      ...(s.model ? { model: s.model } : {}),
      ...(s.tool ? { tool: s.tool } : {}),
      ...(s.olympus ? { olympus: s.olympus } : {}),
      output: s.output,
      error: s.error,
      cost: formatAmount(BigInt(s.cost)),
      started_at: s.startedAt,
      ended_at: s.endedAt,
    })),
    created_at: e.createdAt.toISOString(),
    started_at: e.startedAt?.toISOString() ?? null,
    ended_at: e.endedAt?.toISOString() ?? null,
  };
}
