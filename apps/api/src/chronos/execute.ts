// Running one Chronos execution: its steps in order, each under the 13-minute wall clock. A chat
// step's model is chosen by the front door's rule (inference/decide.ts: a catalog model, or
// Olympus's choice) and called through the Elastic call path (catalog, fallbacks, prepaid
// reservation and settlement); a tool step goes through the managed tools' MCP client, charged at
// the tool's price. The run fee is reserved with the first step before anything starts and settled
// at the end.
import type { Logger } from 'pino';
import { reservationBound } from '../platform/money.ts';
import type { Hold, Wallet } from '../billing/wallet.ts';
import type { ElasticCaller } from '../elastic/call.ts';
import type { ElasticCatalog } from '../elastic/catalog.ts';
import type { CatalogModel } from '../elastic/entry.ts';
import { ApiError } from '../platform/errors.ts';
import { chooseCatalogModel } from '../inference/decide.ts';
import type { RouteMatcher } from '../olympus/routing.ts';
import type { OlympusRepository } from '../olympus/repository.ts';
import type { ToolRepository } from '../tools/repository.ts';
import type { Sealer } from '../platform/sealed.ts';
import { denialMessage, toolAccess } from '../tools/access.ts';
import { closeManagedServers, openManagedServers, walletCharger } from '../tools/managed.ts';
import type { ExecutionRecord, FirstChoice, RunRecord, StepResult } from './records.ts';

export type { FirstChoice } from './records.ts';
import { renderStep, type ChatStep, type Step, type ToolStep } from './steps.ts';

export interface StepDeps {
  wallet: Pick<Wallet, 'reserve'>;
  catalog: Pick<ElasticCatalog, 'get' | 'list'>;
  caller: ElasticCaller;
  tools: Pick<ToolRepository, 'lookup'>;
  /** Olympus policies (absent: an `auto` step fails with olympus_not_enabled). */
  olympus?: Pick<OlympusRepository, 'get'>;
  /** Olympus's embedding routes: the live routes' own matcher (absent: routes are not matched). */
  routes?: RouteMatcher;
  sealer?: Sealer;
  /** MANAGED_TOOL_MAX_RESPONSE_BYTES: what is read of a tool step's MCP answer at most. */
  maxToolResponseBytes: number;
  logger: Logger;
  /** The run fee in micro-units. */
  fee: bigint;
  stepTimeoutMs: number;
}

export const INSUFFICIENT = 'Insufficient balance / payment required';

/** The model a chat step calls, and for `auto` what Olympus chose and why. */
export interface StepModel {
  /** The catalog model called (for `auto`, with Olympus's next choices after its own fallbacks). */
  model: CatalogModel;
  /** `auto`: Olympus's choice and its reason, as the live path's x-berth-olympus-reason says it. */
  olympus?: { model: string; reason: string };
}

type ChooseDeps = Pick<StepDeps, 'catalog' | 'olympus' | 'tools' | 'routes'> & {
  caller: Pick<ElasticCaller, 'state' | 'now'>;
};

/** The body a client would send for this step (`model` as the step names it). */
const chatBody = (step: ChatStep) => ({
  model: step.model,
  messages: step.messages,
  max_tokens: step.max_tokens,
  stream: false,
});

/**
 * The catalog model a chat step calls, decided as the front door decides a live
 * `POST /api/chat/completions` with the same `model` and messages (chooseCatalogModel). `auto` is
 * Olympus's choice: the account's
 * policy (allowed models, objective), its routes by meaning (one embedding call, not charged, within
 * OLYMPUS_ROUTE_TIMEOUT_MS), the models' live state (warm pools, cool-downs, latency). Olympus must
 * still be enabled for the account (the key's tool pin was checked when the step was saved). Throws
 * the ApiError a live call would answer with when there is no model.
 */
export async function chooseStepModel(
  deps: ChooseDeps,
  accountId: string,
  step: ChatStep,
  call: { requestId: string; signal: AbortSignal },
): Promise<StepModel> {
  const body = chatBody(step);
  const found = await chooseCatalogModel(
    {
      catalog: deps.catalog,
      live: deps.caller,
      ...(deps.olympus
        ? {
            olympus: {
              tools: deps.tools,
              policies: deps.olympus,
              ...(deps.routes ? { routes: deps.routes } : {}),
            },
          }
        : {}),
    },
    step.model,
    {
      kinds: ['chat'],
      body,
      requestBytes: JSON.stringify(body).length,
      caller: { accountId, toolPin: [] },
      requestId: call.requestId,
      signal: call.signal,
    },
  );
  if (!found)
    throw new ApiError('validation_error', { message: `model "${step.model}" is not in the catalog` });
  const { model, olympus } = found;
  return olympus ? { model, olympus: { model: olympus.model.name, reason: olympus.reason } } : { model };
}

/** Step 0, decided once: its model (a chat step) and what it may cost at most. */
export interface FirstStep {
  /** Reserved with the run fee before the run starts (0 when the step has no model: it fails). */
  bound: bigint;
  /** The chat step's model, or why there is none (the step then fails with that message). */
  model?: StepModel | ApiError;
}

/**
 * What step 0 may cost at most, with its model chosen once: the execution reserves this bound and
 * then runs the step on the same model (a manual trigger's check hands its choice to the execution).
 */
export async function firstStep(
  deps: Pick<StepDeps, 'catalog' | 'olympus' | 'tools' | 'routes' | 'caller'>,
  accountId: string,
  step: Step,
  call: { requestId: string; signal: AbortSignal },
): Promise<FirstStep> {
  if (step.type === 'tool') {
    const found = await deps.tools.lookup(accountId, [step.tool_id]);
    return { bound: found.get(step.tool_id)?.tool.pricePerCall ?? 0n };
  }
  try {
    const model = await chooseStepModel(deps, accountId, step, call);
    return { bound: chatBound(model.model, step), model };
  } catch (err) {
    if (err instanceof ApiError) return { bound: 0n, model: err };
    throw err;
  }
}

/** A trigger's `auto` choice as job data (JSON), and back (null: the model left the catalog since). */
export function firstChoice(model: StepModel | ApiError | undefined): FirstChoice | undefined {
  if (!model || model instanceof ApiError || !model.olympus) return undefined;
  return { model: model.model.name, fallbacks: [...model.model.fallbacks], olympus: model.olympus };
}
export function stepModelOf(
  catalog: Pick<ElasticCatalog, 'get'>,
  first: FirstChoice | undefined,
): StepModel | undefined {
  if (!first) return undefined;
  const model = catalog.get(first.model);
  return model ? { model: { ...model, fallbacks: first.fallbacks }, olympus: first.olympus } : undefined;
}

function chatBound(model: CatalogModel, step: ChatStep): bigint {
  return reservationBound({
    pricing: model.pricing,
    requestBytes: JSON.stringify(step.messages).length,
    maxTokens: step.max_tokens,
    ...(model.contextLength ? { contextLength: model.contextLength } : {}),
  });
}

export interface StepOutcome {
  ok: boolean;
  output: string | null;
  error: string | null;
  cost: bigint;
  /**
   * The step's work reached an upstream (a model engine answered, a managed tool was called): the
   * run fee is charged only then. A failure on Berth's side (no backend, an internal error, the
   * balance) is never billed.
   */
  ran: boolean;
  model?: string;
  tool?: string;
}

async function chatStep(
  deps: StepDeps,
  run: RunRecord,
  executionId: string,
  step: ChatStep,
  model: CatalogModel,
  signal: AbortSignal,
): Promise<StepOutcome> {
  const body = { ...chatBody(step), model: model.name };
  // The Elastic call path as a function: the same reservation, fallbacks and settlement as a
  // client's call, no HTTP objects; the cost is what the wallet settled.
  const answer = await deps.caller.complete({
    model,
    kinds: ['chat'],
    path: '/chat/completions',
    body,
    requestBytes: JSON.stringify(body).length,
    accountId: run.accountId,
    keyId: run.keyId,
    requestId: executionId,
    signal,
  });
  if (signal.aborted) throw signal.reason;
  const choices = answer.body.choices as { message?: { content?: string | null } }[] | undefined;
  return {
    ok: true,
    output: choices?.[0]?.message?.content ?? '',
    error: null,
    cost: answer.cost,
    ran: true,
    model: answer.model.name,
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
  if (!access.ok)
    return { ok: false, output: null, error: denialMessage(access.denial), cost: 0n, ran: false };
  const tool = access.tools[0]!;
  if (tool.kind !== 'mcp')
    return {
      ok: false,
      output: null,
      error: `"${tool.id}" is a feature switch, not a managed tool`,
      cost: 0n,
      ran: false,
    };
  const [server] = await openManagedServers(
    [tool],
    { sealer: deps.sealer, maxResponseBytes: deps.maxToolResponseBytes },
    signal,
  );
  try {
    if ('error' in server!.session)
      return {
        ok: false,
        output: null,
        error: `Managed tool "${tool.id}" is unavailable: ${server!.session.error}`,
        cost: 0n,
        ran: false,
      };
    const session = server!.session;
    const name = step.name ?? (session.tools.length === 1 ? session.tools[0]!.name : undefined);
    if (!name || !session.tools.some((t) => t.name === name))
      return {
        ok: false,
        output: null,
        error: `${step.name ? `Managed tool "${tool.id}" has no tool "${step.name}"` : `Managed tool "${tool.id}" has ${session.tools.length} tools`}; name one in steps.${index}.name (${session.tools.map((t) => t.name).join(', ')})`,
        cost: 0n,
        ran: false,
      };
    const hold = await walletCharger(deps.wallet, { accountId: run.accountId, keyId: run.keyId })(
      tool.id,
      tool.pricePerCall,
    );
    if (!hold) return { ok: false, output: null, error: INSUFFICIENT, cost: 0n, ran: false };
    const result = await session.call(name, step.input, signal);
    if (result.answered) hold.settle();
    else hold.release();
    const ran = result.answered;
    const cost = ran ? tool.pricePerCall : 0n;
    if (result.isError) return { ok: false, output: null, error: result.text, cost, ran, tool: name };
    return { ok: true, output: result.text, error: null, cost, ran, tool: name };
  } finally {
    await closeManagedServers([server!]);
  }
}

/** Why a run that ran no step on an upstream was not charged, as its reason says it. */
/**
 * A step's signal: the executor's stop, or the step's wall clock. A controller whose timer and stop
 * listener go when the step ends: `AbortSignal.any([stop, AbortSignal.timeout(ms)])` kept each
 * step's timer, and a weak reference in the long-lived stop signal, until its wall clock ran out
 * (a soak's heap snapshots counted them by the thousand).
 */
export function stepSignal(stop: AbortSignal, ms: number): { signal: AbortSignal; release(): void } {
  const c = new AbortController();
  const onStop = () => c.abort(stop.reason);
  const timer = setTimeout(() => c.abort(new DOMException(`over ${ms} ms`, 'TimeoutError')), ms);
  if (stop.aborted) onStop();
  else stop.addEventListener('abort', onStop, { once: true });
  return {
    signal: c.signal,
    release: () => {
      clearTimeout(timer);
      stop.removeEventListener('abort', onStop);
    },
  };
}

export const NOT_CHARGED = 'no step reached a model or tool, so the run fee was not charged';

/**
 * Runs the steps of a claimed execution; `save` is told the results after each step. Returns how
 * it ended. Only infrastructure failures throw. `first`: step 0's model as a manual trigger chose it
 * (absent: chosen here, once, before the admission that reserves its bound). `admitted`: what the
 * manual trigger reserved for the fee and step 0 on this replica, handed over (no second check).
 */
export async function runSteps(
  deps: StepDeps,
  run: RunRecord,
  execution: ExecutionRecord,
  stop: AbortSignal,
  save: (results: StepResult[], cost: bigint) => Promise<void>,
  first?: StepModel,
  admitted?: Hold,
): Promise<{ status: 'succeeded' | 'failed'; reason: string | null; results: StepResult[]; cost: bigint }> {
  const steps = execution.steps;
  // Admission: the fee and the first step must be covered before anything runs. Step 0's model is
  // decided here once: the bound reserved is that model's, and the step runs on it.
  const head =
    first && steps[0]!.type === 'chat'
      ? { bound: chatBound(first.model, steps[0]!), model: first }
      : await firstStep(deps, run.accountId, steps[0]!, { requestId: execution.id, signal: stop });
  const refused = {
    status: 'failed' as const,
    reason: `${INSUFFICIENT}: the balance cannot cover the run fee and the first step`,
    results: [],
    cost: 0n,
  };
  if (admitted) {
    // The trigger's hold becomes the fee's: released and reserved in one turn of the event loop
    // (a reservation the lease covers is taken synchronously), so no other call takes it between.
    admitted.release();
  } else {
    const admission = await deps.wallet.reserve({
      accountId: run.accountId,
      amount: deps.fee + head.bound,
      keyId: run.keyId,
    });
    if (!admission.ok) return refused;
    admission.hold.release();
  }
  const feeHold =
    deps.fee > 0n
      ? await deps.wallet.reserve({ accountId: run.accountId, amount: deps.fee, keyId: run.keyId })
      : undefined;
  if (feeHold && !feeHold.ok) return refused;

  const results: StepResult[] = [];
  const outputs: string[] = [];
  let cost = 0n;
  let ran = false;
  let failure: string | null = null;
  try {
    for (const [index, raw] of steps.entries()) {
      const step = renderStep(raw, outputs);
      const startedAt = new Date();
      const bound = stepSignal(stop, deps.stepTimeoutMs);
      const signal = bound.signal;
      let outcome: StepOutcome;
      let chosen: StepModel | undefined;
      try {
        if (step.type === 'chat') {
          const decided =
            index === 0 && head.model
              ? head.model
              : await chooseStepModel(deps, run.accountId, step, { requestId: execution.id, signal });
          if (decided instanceof ApiError) throw decided;
          chosen = decided;
          outcome = await chatStep(deps, run, execution.id, step, decided.model, signal);
        } else outcome = await toolStep(deps, run, index, step, signal);
      } catch (err) {
        if (stop.aborted) throw err;
        const message = signal.aborted
          ? `The step exceeded the wall clock of ${deps.stepTimeoutMs} ms`
          : err instanceof ApiError
            ? err.message
            : `The step failed: ${(err as Error).message}`;
        // The engine answered (it refused the request, or ran past the wall clock): the step ran.
        const reached = signal.aborted || (err instanceof ApiError && err.code === 'engine_error');
        outcome = { ok: false, output: null, error: message, cost: 0n, ran: reached };
      } finally {
        bound.release();
      }
      ran ||= outcome.ran;
      cost += outcome.cost;
      results.push({
        index,
        type: step.type,
        status: outcome.ok ? 'succeeded' : 'failed',
        ...(outcome.model ? { model: outcome.model } : {}),
        ...(outcome.tool ? { tool: outcome.tool } : {}),
        // Recorded also when the call then failed: the choice was made.
        ...(chosen?.olympus ? { olympus: chosen.olympus } : {}),
        output: outcome.output,
        error: outcome.error,
        cost: outcome.cost.toString(),
        startedAt: startedAt.toISOString(),
        endedAt: new Date().toISOString(),
      });
      // The last step's results are written when the execution ends (one write fewer per run).
      if (outcome.ok && index < steps.length - 1) await save(results, cost + (ran ? deps.fee : 0n));
      if (!outcome.ok) {
        failure = `Step ${index} (${step.type}) failed: ${outcome.error}`;
        break;
      }
      outputs.push(outcome.output ?? '');
    }
  } finally {
    // The fee is charged once a step reached an upstream (the run happened), whatever its outcome;
    // a run that failed on Berth's side before that is never billed.
    if (feeHold?.ok) {
      if (ran)
        feeHold.hold.settle(deps.fee, {
          keyId: run.keyId,
          model: 'chronos',
          promptTokens: 0,
          completionTokens: 0,
        });
      else feeHold.hold.release();
    }
  }
  if (ran) cost += deps.fee;
  if (failure && !ran) failure = `${failure} (${NOT_CHARGED})`;
  return { status: failure ? 'failed' : 'succeeded', reason: failure, results, cost };
}
