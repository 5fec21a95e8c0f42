// Chronos routes (spec §1, §7): scheduled runs of an account and their execution history. Errors in
// the simple shape with a `code`: 403 chronos_disabled (CHRONOS_ENABLED=false), 403
// chronos_not_enabled (the account has not enabled the `chronos` tool), 400 validation_error
// naming the field, 402 when the balance cannot cover the run fee and the first step.
import { z } from 'zod';
import { formatAmount } from '../billing/money.ts';
import type { Wallet } from '../billing/wallet.ts';
import type { Chronos } from '../chronos/index.ts';
import { isoInZone, nextFires, parseCron } from '../chronos/cron.ts';
import type { ExecutionRecord, RunRecord } from '../chronos/repository.ts';
import { createRunBody, patchRunBody, stepSchema, type Step } from '../chronos/steps.ts';
import type { ElasticCatalog } from '../elastic/catalog.ts';
import { ApiError } from '../errors.ts';
import type { KeyCaller } from '../http/auth.ts';
import type { Routes } from '../http/routes.ts';
import { parse } from '../http/validate.ts';
import { newId } from '../keys/format.ts';
import { isOlympusModel } from '../olympus/pick.ts';
import { simpleError } from '../openapi.ts';
import type { ToolRepository } from '../repositories/tools.ts';
import { denialMessage, toolAccess } from '../tools/access.ts';

export interface ChronosRouteDeps {
  chronos: Chronos;
  tools: Pick<ToolRepository, 'lookup'>;
  catalog: Pick<ElasticCatalog, 'get'>;
  wallet: Pick<Wallet, 'reserve'>;
}

const auth = { scopes: ['inference', 'global'], session: 'manage' } as const;
const NEXT_SHOWN = 5;

const runView = z.object({
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

const executionView = z.object({
  id: z.string().describe('`chx_…`'),
  run_id: z.string(),
  trigger: z.enum(['schedule', 'manual']),
  scheduled_for: z.string().nullable().describe('The occurrence it fired for (ISO 8601 with offset)'),
  status: z.enum(['queued', 'running', 'succeeded', 'failed']),
  reason: z.string().nullable().describe('Why it failed'),
  cost: z.string().describe('Run fee plus its steps, decimal string'),
  attempts: z.number().int().describe('More than 1: the replica of an earlier attempt died'),
  steps: z.array(stepResultView),
  created_at: z.string(),
  started_at: z.string().nullable(),
  ended_at: z.string().nullable(),
});

function viewRun(r: RunRecord, now: Date): z.infer<typeof runView> {
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
    created_at: r.createdAt.toISOString(),
    updated_at: r.updatedAt.toISOString(),
  };
}

function viewExecution(e: ExecutionRecord, timezone: string): z.infer<typeof executionView> {
  return {
    id: e.id,
    run_id: e.runId,
    trigger: e.trigger,
    scheduled_for: e.scheduledFor ? isoInZone(e.scheduledFor, timezone) : null,
    status: e.status,
    reason: e.reason,
    cost: formatAmount(e.cost),
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

const notFound = (id: string) => new ApiError('not_found', { message: `Chronos run ${id} not found` });

const errors = {
  401: { description: 'Missing, malformed or revoked key', schema: simpleError },
  403: {
    description:
      '`chronos_disabled` (turned off platform-wide), `chronos_not_enabled` (POST /api/tools {"tool_id": "chronos"}), or a compute key',
    schema: simpleError,
  },
};
const notFoundError = { 404: { description: 'No such run in the caller’s account', schema: simpleError } };
const validationError = {
  400: {
    description: '`validation_error` naming the field (name, schedule, timezone, steps)',
    schema: simpleError,
  },
};

const executionsQuery = z.strictObject({
  limit: z.coerce
    .number({ error: 'must be a number' })
    .int('must be a whole number')
    .min(1, 'must be between 1 and 100')
    .max(100, 'must be between 1 and 100')
    .default(20),
});

export function registerChronosRoutes(routes: Routes, deps: ChronosRouteDeps): void {
  const { chronos } = deps;
  const repo = chronos.repo;

  /** Spec §5.7 and §7: the platform switch, then the account's. */
  const admit = async (caller: KeyCaller) => {
    if (!chronos.config.enabled) throw new ApiError('chronos_disabled');
    const access = await toolAccess(deps.tools, { accountId: caller.accountId, toolPin: [] }, ['chronos']);
    if (!access.ok) throw new ApiError('chronos_not_enabled');
  };

  /** What the steps use exists and is allowed: catalog models (or Olympus), enabled managed tools. */
  const checkSteps = async (caller: KeyCaller, steps: Step[]) => {
    for (const [i, step] of steps.entries()) {
      if (step.type === 'chat') {
        if (isOlympusModel(step.model)) {
          const olympus = await toolAccess(
            deps.tools,
            { accountId: caller.accountId, toolPin: caller.principal.toolPin },
            ['olympus'],
          );
          if (!olympus.ok) throw new ApiError('olympus_not_enabled', { param: `steps.${i}.model` });
          continue;
        }
        const model = deps.catalog.get(step.model);
        if (!model || model.kind !== 'chat')
          throw new ApiError('validation_error', {
            message: `Invalid request body: steps.${i}.model: ${model ? `"${step.model}" is not a chat model` : `no catalog model "${step.model}" (GET /api/models lists them; or "auto", "olympus", "olympus-auto")`}`,
            param: `steps.${i}.model`,
          });
        continue;
      }
      const access = await toolAccess(
        deps.tools,
        { accountId: caller.accountId, toolPin: caller.principal.toolPin },
        [step.tool_id],
      );
      if (!access.ok) {
        if (
          access.denial.reason === 'unknown' ||
          access.denial.toolId === 'olympus' ||
          access.denial.toolId === 'chronos'
        )
          throw new ApiError('validation_error', {
            message: `Invalid request body: steps.${i}.tool_id: ${denialMessage(access.denial)}`,
            param: `steps.${i}.tool_id`,
          });
        throw new ApiError('tool_not_allowed', {
          message: denialMessage(access.denial),
          param: `steps.${i}.tool_id`,
        });
      }
      if (access.tools[0]!.kind !== 'mcp')
        throw new ApiError('validation_error', {
          message: `Invalid request body: steps.${i}.tool_id: "${step.tool_id}" is a feature switch, not a managed tool`,
          param: `steps.${i}.tool_id`,
        });
    }
  };

  const owned = async (caller: KeyCaller, id: string) => {
    const run = await repo.get(caller.accountId, id);
    if (!run) throw notFound(id);
    return run;
  };

  routes.add(
    {
      method: 'post',
      path: '/api/chronos/runs',
      tag: 'chronos',
      auth,
      summary: 'Create a scheduled run',
      description:
        'A run fires on its `schedule` (5-field cron or an alias such as `@hourly`, read in the IANA `timezone`) and runs its `steps` in order: `chat` (a catalog model or `auto`, `messages`, `max_tokens`) and `tool` (a managed tool’s MCP call with `input`). A step reads an earlier step’s output with `{{steps.N.output}}`. The answer shows the next fire times.',
      body: createRunBody,
      responses: {
        201: { description: 'Created, with `next_fires`', schema: runView },
        ...validationError,
        ...errors,
      },
    },
    async ({ caller, body, res }) => {
      await admit(caller);
      const b = body();
      await checkSteps(caller, b.steps);
      const now = new Date();
      const id = newId('chr');
      const nextFireAt = chronos.next(b.schedule, b.timezone, now);
      if (!nextFireAt)
        throw new ApiError('validation_error', {
          message: 'Invalid request body: schedule: never fires (no such date in the next 9 years)',
          param: 'schedule',
        });
      const run = await repo.create(
        { id, accountId: caller.accountId, keyId: caller.principal.keyId, nextFireAt, ...b },
        (db) => chronos.enqueueFire(db, id, nextFireAt, b.steps),
      );
      res.status(201).json(viewRun(run, now));
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/api/chronos/runs',
      tag: 'chronos',
      auth,
      summary: 'The account’s scheduled runs',
      responses: {
        200: { description: 'Runs, oldest first', schema: z.object({ data: z.array(runView) }) },
        ...errors,
      },
    },
    async ({ caller, res }) => {
      await admit(caller);
      const now = new Date();
      res.json({ data: (await repo.list(caller.accountId)).map((r) => viewRun(r, now)) });
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/api/chronos/runs/{id}',
      tag: 'chronos',
      auth,
      summary: 'One scheduled run',
      responses: { 200: { description: 'The run', schema: runView }, ...errors, ...notFoundError },
    },
    async ({ caller, params, res }) => {
      await admit(caller);
      res.json(viewRun(await owned(caller, params.id), new Date()));
    },
  );

  routes.add(
    {
      method: 'patch',
      path: '/api/chronos/runs/{id}',
      tag: 'chronos',
      auth,
      summary: 'Change a run’s name, schedule, timezone or steps',
      description:
        'A new schedule or timezone takes effect from now: the pending fire is replaced. Executions already queued keep the steps they were queued with.',
      body: patchRunBody,
      responses: {
        200: { description: 'The run', schema: runView },
        ...validationError,
        ...errors,
        ...notFoundError,
      },
    },
    async ({ caller, params, body, res }) => {
      await admit(caller);
      const current = await owned(caller, params.id);
      const b = body();
      if (b.steps) await checkSteps(caller, b.steps);
      const now = new Date();
      const schedule = b.schedule ?? current.schedule;
      const timezone = b.timezone ?? current.timezone;
      const moved = schedule !== current.schedule || timezone !== current.timezone;
      const nextFireAt = moved ? chronos.next(schedule, timezone, now) : undefined;
      if (moved && !nextFireAt)
        throw new ApiError('validation_error', {
          message: 'Invalid request body: schedule: never fires (no such date in the next 9 years)',
          param: 'schedule',
        });
      const run = await repo.update(
        caller.accountId,
        current.id,
        {
          ...(b.name !== undefined ? { name: b.name } : {}),
          ...(b.schedule !== undefined ? { schedule: b.schedule } : {}),
          ...(b.timezone !== undefined ? { timezone: b.timezone } : {}),
          ...(b.steps !== undefined ? { steps: b.steps } : {}),
          ...(moved ? { nextFireAt: nextFireAt! } : {}),
        },
        // A new schedule: a new pending fire (and its pre-warm). New steps only: their pre-warm for the
        // pending fire (the endpoints they call may differ).
        moved
          ? (db) => chronos.enqueueFire(db, current.id, nextFireAt!, b.steps ?? current.steps)
          : b.steps && current.nextFireAt
            ? (db) => chronos.enqueuePrewarm(db, current.id, current.nextFireAt!, b.steps!)
            : undefined,
      );
      if (!run) throw notFound(params.id);
      res.json(viewRun(run, now));
    },
  );

  routes.add(
    {
      method: 'delete',
      path: '/api/chronos/runs/{id}',
      tag: 'chronos',
      auth,
      summary: 'Delete a run and its history (its pending fire does nothing)',
      responses: { 200: { description: 'The deleted run', schema: runView }, ...errors, ...notFoundError },
    },
    async ({ caller, params, res }) => {
      await admit(caller);
      const run = await repo.delete(caller.accountId, params.id);
      if (!run) throw notFound(params.id);
      res.json({ ...viewRun(run, new Date()), next_fire_at: null, next_fires: [] });
    },
  );

  routes.add(
    {
      method: 'post',
      path: '/api/chronos/runs/{id}/trigger',
      tag: 'chronos',
      auth,
      summary: 'Run now (queued at once; its schedule is unchanged)',
      responses: {
        202: { description: 'The queued execution', schema: executionView },
        402: {
          description: 'Insufficient balance / payment required (run fee and first step)',
          schema: simpleError,
        },
        ...errors,
        ...notFoundError,
      },
    },
    async ({ caller, params, res }) => {
      await admit(caller);
      const run = await owned(caller, params.id);
      const id = newId('chx');
      const admission = await chronos.admission(run, id, caller.signal);
      const reservation = await deps.wallet.reserve({ accountId: run.accountId, amount: admission.amount });
      if (!reservation.ok) throw new ApiError('insufficient_balance');
      // Only a check: the replica that runs it reserves again, step by step (a first step on `auto`
      // on the model chosen here).
      reservation.hold.release();
      const execution = await repo.queueManual(run, id, (db) =>
        chronos.enqueueExecute(db, id, run.steps.length, admission.first),
      );
      res.status(202).json(viewExecution(execution, run.timezone));
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/api/chronos/runs/{id}/executions',
      tag: 'chronos',
      auth,
      summary: 'Execution history, newest first: status, times, each step’s output or error, cost',
      responses: {
        200: { description: 'Executions', schema: z.object({ data: z.array(executionView) }) },
        400: { description: 'Invalid `limit`', schema: simpleError },
        ...errors,
        ...notFoundError,
      },
    },
    async ({ caller, params, req, res }) => {
      await admit(caller);
      const { limit } = parse(executionsQuery, req.query, 'query');
      const run = await owned(caller, params.id);
      const list = await repo.executions(caller.accountId, run.id, limit);
      res.json({ data: list.map((e) => viewExecution(e, run.timezone)) });
    },
  );
}
