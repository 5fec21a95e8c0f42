// Chronos routes (spec §1, §7): scheduled runs of an account and their execution history. Errors in
// the simple shape with a `code`: 403 chronos_disabled (CHRONOS_ENABLED=false), 403
// chronos_not_enabled (the account has not enabled the `chronos` tool), 400 validation_error
// naming the field, 402 when the balance cannot cover the run fee and the first step.
import { z } from 'zod';
import type { Chronos } from './index.ts';
import { createRunBody, patchRunBody, type Step } from './steps.ts';
import { executionView, runView, viewExecution, viewRun } from './views.ts';
import type { ElasticCatalog } from '../elastic/catalog.ts';
import { ApiError } from '../platform/errors.ts';
import type { KeyCaller } from '../http/auth.ts';
import type { Routes } from '../http/routes.ts';
import { parse } from '../http/validate.ts';
import { newId } from '../platform/ids.ts';
import { isOlympusModel } from '../olympus/choose.ts';
import { simpleError } from '../http/openapi.ts';
import { listPage, listQuery, pageOf } from '../http/lists.ts';
import { quotaExceeded } from '../accounts/quotas.ts';
import type { ToolRepository } from '../tools/repository.ts';
import { denialMessage, toolAccess } from '../tools/access.ts';

export interface ChronosRouteDeps {
  chronos: Chronos;
  tools: Pick<ToolRepository, 'lookup'>;
  catalog: Pick<ElasticCatalog, 'get'>;
}

const auth = { scopes: ['inference', 'global'], session: 'manage' } as const;

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

/** The checks every Chronos route makes: Chronos on, the account's switch, the steps, the run's owner. */
function routeChecks(deps: ChronosRouteDeps) {
  const { chronos } = deps;
  const repo = chronos.repo;

  /** Spec §5.7 and §7: the platform switch, then the account's. */
  const admit = async (caller: KeyCaller) => {
    if (!chronos.config.enabled) throw new ApiError('chronos_disabled');
    const access = await toolAccess(deps.tools, { accountId: caller.accountId, toolPin: [] }, ['chronos']);
    if (!access.ok) throw new ApiError('chronos_not_enabled');
  };

  /**
   * What the steps use exists and is allowed: catalog models (or Olympus), enabled managed tools.
   * Every step that names something missing is listed in one 400; a refusal of another kind (a tool
   * outside the key's pin, Olympus not enabled) is answered as itself.
   */
  const checkSteps = async (caller: KeyCaller, steps: Step[]) => {
    const invalid: { field: string; problem: string }[] = [];
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
          invalid.push({
            field: `steps.${i}.model`,
            problem: model
              ? `"${step.model}" is not a chat model`
              : `no catalog model "${step.model}" (GET /api/models lists them; or "auto", "olympus", "olympus-auto")`,
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
        ) {
          invalid.push({ field: `steps.${i}.tool_id`, problem: denialMessage(access.denial) });
          continue;
        }
        throw new ApiError('tool_not_allowed', {
          message: denialMessage(access.denial),
          param: `steps.${i}.tool_id`,
        });
      }
      if (access.tools[0]!.kind !== 'mcp')
        invalid.push({
          field: `steps.${i}.tool_id`,
          problem: `"${step.tool_id}" is a feature switch, not a managed tool`,
        });
    }
    if (invalid.length)
      throw new ApiError('validation_error', {
        message: `Invalid request body: ${invalid.map((x) => `${x.field}: ${x.problem}`).join('; ')}`,
        param: invalid[0]!.field,
      });
  };

  const owned = async (caller: KeyCaller, id: string) => {
    const run = await repo.get(caller.accountId, id);
    if (!run) throw notFound(id);
    return run;
  };

  return { admit, checkSteps, owned };
}

type Checks = ReturnType<typeof routeChecks>;

export function registerChronosRoutes(routes: Routes, deps: ChronosRouteDeps): void {
  const checks = routeChecks(deps);
  registerRunRoutes(routes, deps.chronos, checks);
  registerExecutionRoutes(routes, deps.chronos, checks);
}

/** Create, list, read, change and delete runs. */
function registerRunRoutes(routes: Routes, chronos: Chronos, { admit, checkSteps, owned }: Checks): void {
  const repo = chronos.repo;
  routes.add(
    {
      method: 'post',
      path: '/api/chronos/runs',
      tag: 'chronos',
      auth,
      summary: 'Create a scheduled run',
      description:
        'A run fires on its `schedule` (5-field cron or an alias such as `@hourly`, read in the IANA `timezone`) and runs its `steps` in order: `chat` (a catalog model or `auto`, `messages`, `max_tokens`) and `tool` (a managed tool’s MCP call with `input`). A step reads an earlier step’s output with `{{steps.N.output}}`. The answer shows the next fire times. The run belongs to the account (revoking the key that created it does not stop it). An account has at most its Chronos runs quota of runs (BERTH_QUOTA_CHRONOS_RUNS, GET /api/quotas).',
      body: createRunBody,
      everyBodyIssue: true,
      responses: {
        201: { description: 'Created, with `next_fires`', schema: runView },
        ...validationError,
        ...errors,
        403: {
          description: `${errors[403].description}; \`quota_exceeded\`: the account has as many runs as its quota`,
          schema: simpleError,
        },
      },
    },
    async ({ caller, body, res }) => {
      await admit(caller);
      const b = body();
      await checkSteps(caller, b.steps);
      const now = chronos.now();
      const id = newId('chr');
      const nextFireAt = chronos.next(b.schedule, b.timezone, now);
      if (!nextFireAt)
        throw new ApiError('validation_error', {
          message: 'Invalid request body: schedule: never fires (no such date in the next 9 years)',
          param: 'schedule',
        });
      // The run's row is its pending fire (and pre-warm): saved with it, due from then on.
      const prewarmAt = chronos.prewarmAt(b.steps, nextFireAt);
      const saved = await repo.create(
        { id, accountId: caller.accountId, keyId: caller.principal.keyId, nextFireAt, prewarmAt, ...b },
        chronos.config.runsQuota,
      );
      if (!saved.created) throw quotaExceeded('chronos_runs', saved.count, saved.count + 1, saved.limit);
      chronos.scheduled(nextFireAt, prewarmAt);
      res.status(201).json(viewRun(saved.run, now));
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/api/chronos/runs',
      tag: 'chronos',
      auth,
      summary: 'The account’s scheduled runs, oldest first, a page at a time',
      description:
        'Query: `limit` (1–100, default 100) and `after` (the `last_id` of the previous page). An `after` run deleted since is a 400: start again without it.',
      query: listQuery,
      responses: {
        200: { description: 'One page of runs, oldest first', schema: listPage(runView) },
        400: { description: '`limit` or `after` is invalid (named in the message)', schema: simpleError },
        ...errors,
      },
    },
    async ({ caller, req, res }) => {
      await admit(caller);
      const q = parse(listQuery, req.query, 'query');
      const rows = await repo.page(caller.accountId, {
        limit: q.limit + 1,
        ...(q.after ? { after: q.after } : {}),
      });
      if (!rows)
        throw new ApiError('validation_error', {
          message: `Invalid query: after: no Chronos run ${q.after} in this account`,
          param: 'after',
        });
      const now = chronos.now();
      res.json(
        pageOf(
          rows.slice(0, q.limit).map((r) => viewRun(r, now)),
          rows.length > q.limit,
        ),
      );
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
      res.json(viewRun(await owned(caller, params.id), chronos.now()));
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
      everyBodyIssue: true,
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
      const now = chronos.now();
      const schedule = b.schedule ?? current.schedule;
      const timezone = b.timezone ?? current.timezone;
      const moved = schedule !== current.schedule || timezone !== current.timezone;
      const nextFireAt = moved ? chronos.next(schedule, timezone, now) : undefined;
      if (moved && !nextFireAt)
        throw new ApiError('validation_error', {
          message: 'Invalid request body: schedule: never fires (no such date in the next 9 years)',
          param: 'schedule',
        });
      const steps = b.steps ?? current.steps;
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
        // A new schedule moves the pending fire (the fire of the old time finds nothing due); new
        // steps only change the pending fire's pre-warm (the endpoints they call may differ).
        moved || b.steps ? (next) => chronos.prewarmAt(steps, next) : undefined,
      );
      if (run) chronos.scheduled(run.nextFireAt, run.prewarmAt);
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
      res.json({ ...viewRun(run, chronos.now()), next_fire_at: null, next_fires: [] });
    },
  );
}

/** Run now, and the execution history. */
function registerExecutionRoutes(routes: Routes, chronos: Chronos, { admit, owned }: Checks): void {
  const repo = chronos.repo;
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
      // The fee and step 0's bound stay reserved until the execution starts, so triggers at once
      // cannot accept more work than the balance can start (a first step on `auto` runs on the
      // model chosen here).
      const admission = await chronos.admit(run, id, caller.signal);
      if (!admission.ok) throw new ApiError('insufficient_balance');
      let execution;
      try {
        execution = await repo.queueManual(run, id, admission.first);
      } catch (err) {
        admission.cancel();
        throw err;
      }
      // Claimed here at once when a slot is free (the reservation then goes with it); every replica
      // was told too.
      chronos.queued();
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
