// Running one Chronos execution: its steps in order, each under the 13-minute wall clock, each
// model call through the Elastic call path (catalog, fallbacks, prepaid reservation and settlement)
// and each tool step through the managed tools' MCP client, charged at the tool's price. The run fee
// is reserved with the first step before anything starts and settled at the end.
import type { Response } from 'express';
import type { Logger } from 'pino';
import { callCost, reservationBound } from '../billing/money.ts';
import type { Wallet } from '../billing/wallet.ts';
import type { ElasticCaller } from '../elastic/call.ts';
import { MODEL_HEADER } from '../elastic/call.ts';
import type { ElasticCatalog } from '../elastic/catalog.ts';
import type { CatalogModel } from '../elastic/entry.ts';
import { ApiError } from '../errors.ts';
import { pickModel, type Candidate } from '../olympus/pick.ts';
import type { OlympusRepository } from '../repositories/olympus.ts';
import type { ToolRepository } from '../repositories/tools.ts';
import type { Sealer } from '../secrets/sealed.ts';
import { denialMessage, toolAccess } from '../tools/access.ts';
import { closeManagedServers, openManagedServers, walletCharger } from '../tools/managed.ts';
import type { ExecutionRecord, RunRecord, StepResult } from './repository.ts';
import { renderStep, type ChatStep, type Step, type ToolStep } from './steps.ts';

export interface StepDeps {
  wallet: Pick<Wallet, 'reserve'>;
  catalog: Pick<ElasticCatalog, 'get' | 'list'>;
  caller: ElasticCaller;
  tools: Pick<ToolRepository, 'lookup'>;
  olympus?: Pick<OlympusRepository, 'get'>;
  sealer?: Sealer;
  logger: Logger;
  /** The run fee in micro-units. */
  fee: bigint;
  stepTimeoutMs: number;
}

export const INSUFFICIENT = 'Insufficient balance / payment required';

/** The catalog model a chat step calls (`auto`: Olympus's choice under the account's policy). */
export async function resolveModel(
  deps: Pick<StepDeps, 'catalog' | 'olympus'>,
  accountId: string,
  step: ChatStep,
): Promise<CatalogModel | string> {
  if (step.model !== 'auto')
    return deps.catalog.get(step.model) ?? `model "${step.model}" is not in the catalog`;
  const policy = deps.olympus
    ? await deps.olympus.get(accountId)
    : { allowedModels: [] as string[], objective: 'cost' as const };
  const candidates: Candidate[] = deps.catalog
    .list()
    .filter((m) => m.kind === 'chat')
    .map((m) => ({
      name: m.name,
      kind: m.kind,
      contextLength: m.contextLength ?? Number.MAX_SAFE_INTEGER,
      tools: true,
      inputPerMTok: m.pricing.inputPerMTok,
      outputPerMTok: m.pricing.outputPerMTok,
      warm: true,
    }));
  const promptTokens = JSON.stringify(step.messages).length;
  const choice = pickModel(
    { kind: 'chat', promptTokens, maxTokens: step.max_tokens, tools: false },
    { allowedModels: policy.allowedModels, objective: policy.objective },
    candidates,
    Date.now(),
  );
  if (!choice.ok) return 'Olympus found no catalog model for this step (auto)';
  return deps.catalog.get(choice.model)!;
}

/** What a step may cost at most: the reservation made before it starts. */
export async function stepBound(
  deps: Pick<StepDeps, 'catalog' | 'olympus' | 'tools'>,
  accountId: string,
  step: Step,
): Promise<bigint> {
  if (step.type === 'tool') {
    const found = await deps.tools.lookup(accountId, [step.tool_id]);
    return found.get(step.tool_id)?.tool.pricePerCall ?? 0n;
  }
  const model = await resolveModel(deps, accountId, step);
  if (typeof model === 'string') return 0n;
  return chatBound(model, step);
}

function chatBound(model: CatalogModel, step: ChatStep): bigint {
  return reservationBound({
    pricing: model.pricing,
    requestBytes: JSON.stringify(step.messages).length,
    maxTokens: step.max_tokens,
    ...(model.contextLength ? { contextLength: model.contextLength } : {}),
  });
}

/**
 * A stand-in for the Express response the Elastic call path writes to: it keeps the status, the
 * headers and the (non-streamed) body, so a model call made by Chronos goes through exactly the
 * path a client's call does.
 */
function captureResponse(): { res: Response; body: () => string; status: () => number } {
  let status = 200;
  let sent: Buffer | undefined;
  const headers = new Map<string, string>();
  const res = {
    get headersSent() {
      return sent !== undefined;
    },
    setHeader(name: string, value: string) {
      headers.set(name.toLowerCase(), String(value));
      return res;
    },
    getHeader: (name: string) => headers.get(name.toLowerCase()),
    status(code: number) {
      status = code;
      return res;
    },
    type() {
      return res;
    },
    send(buf: Buffer | string) {
      sent = Buffer.isBuffer(buf) ? buf : Buffer.from(buf);
      return res;
    },
  };
  return {
    res: res as unknown as Response,
    body: () => sent?.toString('utf8') ?? '',
    status: () => status,
  };
}

export interface StepOutcome {
  ok: boolean;
  output: string | null;
  error: string | null;
  cost: bigint;
  model?: string;
  tool?: string;
}

async function chatStep(
  deps: StepDeps,
  run: RunRecord,
  executionId: string,
  step: ChatStep,
  signal: AbortSignal,
): Promise<StepOutcome> {
  const model = await resolveModel(deps, run.accountId, step);
  if (typeof model === 'string') return { ok: false, output: null, error: model, cost: 0n };
  const body = { model: model.name, messages: step.messages, max_tokens: step.max_tokens, stream: false };
  const capture = captureResponse();
  await deps.caller.call(
    {
      model,
      kinds: ['chat'],
      path: '/chat/completions',
      body,
      requestBytes: JSON.stringify(body).length,
      accountId: run.accountId,
      keyId: run.keyId,
      requestId: executionId,
      signal,
    },
    capture.res,
  );
  if (signal.aborted) throw signal.reason;
  const answered = deps.catalog.get(String(capture.res.getHeader(MODEL_HEADER) ?? model.name)) ?? model;
  const parsed = JSON.parse(capture.body()) as {
    choices?: { message?: { content?: string | null } }[];
    usage?: { prompt_tokens?: number; completion_tokens?: number };
  };
  const cost = callCost(
    answered.pricing,
    parsed.usage?.prompt_tokens ?? 0,
    parsed.usage?.completion_tokens ?? 0,
  );
  return {
    ok: true,
    output: parsed.choices?.[0]?.message?.content ?? '',
    error: null,
    cost,
    model: answered.name,
  };
}

async function toolStep(
  deps: StepDeps,
  run: RunRecord,
  index: number,
  step: ToolStep,
  signal: AbortSignal,
): Promise<StepOutcome> {
  const access = await toolAccess(deps.tools, { accountId: run.accountId, toolPin: [] }, [step.tool_id]);
  if (!access.ok) return { ok: false, output: null, error: denialMessage(access.denial), cost: 0n };
  const tool = access.tools[0]!;
  if (tool.kind !== 'mcp')
    return {
      ok: false,
      output: null,
      error: `"${tool.id}" is a feature switch, not a managed tool`,
      cost: 0n,
    };
  const [server] = await openManagedServers([tool], deps.sealer, signal);
  try {
    if ('error' in server!.session)
      return {
        ok: false,
        output: null,
        error: `Managed tool "${tool.id}" is unavailable: ${server!.session.error}`,
        cost: 0n,
      };
    const session = server!.session;
    const name = step.name ?? (session.tools.length === 1 ? session.tools[0]!.name : undefined);
    if (!name || !session.tools.some((t) => t.name === name))
      return {
        ok: false,
        output: null,
        error: `${step.name ? `Managed tool "${tool.id}" has no tool "${step.name}"` : `Managed tool "${tool.id}" has ${session.tools.length} tools`}; name one in steps.${index}.name (${session.tools.map((t) => t.name).join(', ')})`,
        cost: 0n,
      };
    const hold = await walletCharger(deps.wallet, { accountId: run.accountId, keyId: run.keyId })(
      tool.id,
      tool.pricePerCall,
    );
    if (!hold) return { ok: false, output: null, error: INSUFFICIENT, cost: 0n };
    const result = await session.call(name, step.input, signal);
    if (result.answered) hold.settle();
    else hold.release();
    const cost = result.answered ? tool.pricePerCall : 0n;
    if (result.isError) return { ok: false, output: null, error: result.text, cost, tool: name };
    return { ok: true, output: result.text, error: null, cost, tool: name };
  } finally {
    await closeManagedServers([server!]);
  }
}

/**
 * Runs the steps of a claimed execution; `save` is told the results after each step. Returns how
 * it ended. Only infrastructure failures throw.
 */
export async function runSteps(
  deps: StepDeps,
  run: RunRecord,
  execution: ExecutionRecord,
  stop: AbortSignal,
  save: (results: StepResult[], cost: bigint) => Promise<void>,
): Promise<{ status: 'succeeded' | 'failed'; reason: string | null; results: StepResult[]; cost: bigint }> {
  const steps = execution.steps;
  // Admission: the fee and the first step must be covered before anything runs.
  const admission = await deps.wallet.reserve({
    accountId: run.accountId,
    amount: deps.fee + (await stepBound(deps, run.accountId, steps[0]!)),
  });
  if (!admission.ok)
    return {
      status: 'failed',
      reason: `${INSUFFICIENT}: the balance cannot cover the run fee and the first step`,
      results: [],
      cost: 0n,
    };
  admission.hold.release();
  const feeHold =
    deps.fee > 0n ? await deps.wallet.reserve({ accountId: run.accountId, amount: deps.fee }) : undefined;
  if (feeHold && !feeHold.ok)
    return {
      status: 'failed',
      reason: `${INSUFFICIENT}: the balance cannot cover the run fee and the first step`,
      results: [],
      cost: 0n,
    };

  const results: StepResult[] = [];
  const outputs: string[] = [];
  let cost = deps.fee;
  let failure: string | null = null;
  try {
    for (const [index, raw] of steps.entries()) {
      const step = renderStep(raw, outputs);
      const startedAt = new Date();
      const signal = AbortSignal.any([stop, AbortSignal.timeout(deps.stepTimeoutMs)]);
      let outcome: StepOutcome;
      try {
        outcome =
          step.type === 'chat'
            ? await chatStep(deps, run, execution.id, step, signal)
            : await toolStep(deps, run, index, step, signal);
      } catch (err) {
        if (stop.aborted) throw err;
        const message = signal.aborted
          ? `The step exceeded the wall clock of ${deps.stepTimeoutMs} ms`
          : err instanceof ApiError
            ? err.message
            : `The step failed: ${(err as Error).message}`;
        outcome = { ok: false, output: null, error: message, cost: 0n };
      }
      cost += outcome.cost;
      results.push({
        index,
        type: step.type,
        status: outcome.ok ? 'succeeded' : 'failed',
        ...(outcome.model ? { model: outcome.model } : {}),
        ...(outcome.tool ? { tool: outcome.tool } : {}),
        output: outcome.output,
        error: outcome.error,
        cost: outcome.cost.toString(),
        startedAt: startedAt.toISOString(),
        endedAt: new Date().toISOString(),
      });
      // The last step's results are written when the execution ends (one write fewer per run).
      if (outcome.ok && index < steps.length - 1) await save(results, cost);
      if (!outcome.ok) {
        failure = `Step ${index} (${step.type}) failed: ${outcome.error}`;
        break;
      }
      outputs.push(outcome.output ?? '');
    }
  } finally {
    // The fee is charged once a step ran (the execution happened), whatever its outcome.
    if (feeHold?.ok) {
      if (results.length)
        feeHold.hold.settle(deps.fee, {
          keyId: run.keyId,
          model: 'chronos',
          promptTokens: 0,
          completionTokens: 0,
        });
      else feeHold.hold.release();
    }
  }
  if (!results.length) cost = 0n;
  return { status: failure ? 'failed' : 'succeeded', reason: failure, results, cost };
}
