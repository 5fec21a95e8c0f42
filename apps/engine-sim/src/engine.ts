// The engine: admits validated requests (or refuses them at --capacity), decides each answer,
// schedules it, consults the prefix cache when a request gets its slot, answers non-streaming
// requests and embeddings, hands streams to the pump, and keeps the accounting (metrics, the
// in-flight set for draining).
import { randomUUID } from 'node:crypto';
import type http from 'node:http';
import { performance } from 'node:perf_hooks';
import type { EngineSimOptions } from './config.ts';
import { embeddingsBody, type EmbeddingRequest } from './embeddings.ts';
import { atCapacity, injectedFailure, openaiErrorBody } from './errors.ts';
import { sendError, sendJson } from './http.ts';
import type { Emitter, GenerationRequest, Job, Output, Plan } from './job.ts';
import { EngineMetrics, type FinishedReason } from './metrics.ts';
import { PrefixCache } from './prefix-cache.ts';
import { chatCallEmitter, completionBody, textEmitter } from './render.ts';
import { responsesBody, responsesCallEmitter, responsesTextEmitter } from './responses.ts';
import { Scheduler } from './scheduler.ts';
import { firstToken, type StreamHost } from './stream.ts';
import { pieces, seedFor, TokenGenerator } from './text.ts';
import { writtenCall } from './tools.ts';

/** An embedding request in the scheduler: prefill only, answered when its prefill time is over. */
interface EmbeddingJob {
  state: Job['state'];
  res: http.ServerResponse;
  request: EmbeddingRequest;
  plan: Plan;
  arrivedAt: number;
  timer: NodeJS.Timeout | null;
}

function hex(): string {
  return randomUUID().replaceAll('-', '');
}

export class Engine implements StreamHost {
  readonly metrics: EngineMetrics;
  readonly modelJson: string;
  readonly prefixCache: PrefixCache;
  private readonly o: EngineSimOptions;
  private readonly scheduler: Scheduler<Job | EmbeddingJob>;
  private readonly active = new Set<Job | EmbeddingJob>(); // queued + running
  private readonly hung = new Set<http.ServerResponse>();
  private idleWaiter: (() => void) | null = null;
  private readonly emitters: Record<
    'chatText' | 'chatCall' | 'completion' | 'respText' | 'respCall',
    Emitter
  >;

  constructor(o: EngineSimOptions) {
    this.o = o;
    this.metrics = new EngineMetrics(o.servedModelNames[0]!, o.maxNumSeqs);
    this.modelJson = JSON.stringify(o.servedModelNames[0]!);
    this.prefixCache = new PrefixCache(o.prefixCacheBlocks);
    this.scheduler = new Scheduler<Job | EmbeddingJob>(o.maxNumSeqs, this.metrics, (job) =>
      'request' in job ? this.startEmbedding(job) : this.start(job),
    );
    const m = this.modelJson;
    const details = o.enablePromptTokensDetails;
    this.emitters = {
      chatText: textEmitter('chat', m, details),
      chatCall: chatCallEmitter(m, details),
      completion: textEmitter('completion', m, details),
      respText: responsesTextEmitter(m),
      respCall: responsesCallEmitter(m),
    };
  }

  /** Requests accepted and not yet answered (queued, running or hung). */
  get inFlight(): number {
    return this.active.size + this.hung.size;
  }

  /**
   * Whether a new request may come in: at --capacity the simulator answers 429 with retry-after, as
   * an overloaded hosted upstream does (OpenAI's error body), before reading anything else.
   */
  admit(res: http.ServerResponse): boolean {
    const capacity = this.o.capacity;
    if (capacity === null || this.inFlight < capacity) return true;
    sendJson(res, 429, openaiErrorBody(atCapacity(capacity), 'rate_limit_exceeded'), { 'retry-after': '1' });
    return false;
  }

  /** Failure knobs that answer before any work: an injected status, or never answering. */
  private shortCircuit(plan: Plan, res: http.ServerResponse): boolean {
    if (plan.failStatus !== null && plan.errorAfter === null) {
      sendError(res, injectedFailure(plan.failStatus));
      return true;
    }
    if (plan.hang) {
      this.hung.add(res);
      res.on('close', () => {
        this.hung.delete(res);
        this.checkIdle();
      });
      return true;
    }
    return false;
  }

  /** Runs a validated generation request under its plan, answering on `res`. */
  generate(r: GenerationRequest, plan: Plan, res: http.ServerResponse, arrivedAt: number): void {
    if (this.shortCircuit(plan, res)) return;
    const output = this.decide(r, plan);
    const call = output.call !== null;
    const emitter =
      r.kind === 'chat'
        ? call
          ? this.emitters.chatCall
          : this.emitters.chatText
        : r.kind === 'completion'
          ? this.emitters.completion
          : call
            ? this.emitters.respCall
            : this.emitters.respText;
    const idPrefix = r.kind === 'chat' ? 'chatcmpl-' : r.kind === 'completion' ? 'cmpl-' : 'resp_';
    const job: Job = {
      kind: r.kind,
      res,
      stream: r.stream,
      includeUsage: r.includeUsage,
      continuousUsage: r.continuousUsage,
      id: idPrefix + hex(),
      created: Math.floor(Date.now() / 1000),
      prompt: r.prompt,
      output,
      seed: seedFor(r.prompt.text, r.seed),
      plan,
      arrivedAt,
      responses: r.responses,
      emitter,
      state: 'queued',
      timer: null,
      cachedTokens: 0,
      emitted: 0,
      firstTokenAt: 0,
      lastTokenAt: 0,
      gen: null,
      paused: false,
      plain: false,
      chunkPrefix: '',
      chunkSuffix: '',
      seq: 0,
      textEsc: '',
    };
    if (r.stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
      res.flushHeaders();
    }
    res.on('close', () => {
      if (job.state !== 'done') this.finish(job, 'abort');
    });
    this.active.add(job);
    this.scheduler.submit(job);
  }

  /**
   * The answer: its length and finish reason, and whether it is words, tool results or a tool call.
   * Length is the model's "natural" length unless max_tokens cuts it short (finish_reason
   * "length"); `ignore_eos` (vLLM's benchmark switch) generates exactly max_tokens. A tool call cut
   * by max_tokens comes out as the text written so far, as vLLM's parser leaves it.
   */
  private decide(r: GenerationRequest, plan: Plan): Output {
    const { maxTokens } = r;
    const room = this.o.maxModelLen - r.prompt.tokens;
    let fixed = null;
    let call = null;
    if (r.tools.type === 'results') fixed = pieces(r.tools.text);
    else if (r.tools.type === 'call') {
      const written = writtenCall(r.tools.name, r.tools.arguments);
      fixed = pieces(written.text);
      if ((maxTokens === null || maxTokens >= fixed.length) && room >= fixed.length) {
        const id = hex();
        call = {
          ...written,
          name: r.tools.name,
          arguments: r.tools.arguments,
          callId: r.kind === 'responses' ? `call_${id}` : `chatcmpl-tool-${id}`,
          itemId: `fc_${id}`,
        };
        return { tokens: fixed.length, fixed, call, finishReason: 'tool_calls' };
      }
    }
    let natural = fixed ? fixed.length : plan.outputTokens;
    if (r.ignoreEos && maxTokens !== null) natural = maxTokens;
    natural = Math.min(natural, room);
    const tokens = maxTokens !== null ? Math.min(maxTokens, natural) : natural;
    const finishReason = (maxTokens !== null && tokens >= maxTokens) || tokens < natural ? 'length' : 'stop';
    return { tokens, fixed, call, finishReason };
  }

  /** Runs a validated embeddings request: one scheduler slot for its prefill time. */
  embed(request: EmbeddingRequest, plan: Plan, res: http.ServerResponse, arrivedAt: number): void {
    if (this.shortCircuit(plan, res)) return;
    const job: EmbeddingJob = { state: 'queued', res, request, plan, arrivedAt, timer: null };
    res.on('close', () => {
      if (job.state !== 'done') this.finish(job, 'abort');
    });
    this.active.add(job);
    this.scheduler.submit(job);
  }

  /** The request has a slot: prefill (what the prefix cache does not hold), then tokens. */
  private start(job: Job): void {
    const metrics = this.metrics;
    const tokens = job.prompt.tokens;
    metrics.promptTokens += tokens;
    const hasher = job.prompt.hasher;
    if (hasher !== null) {
      // vLLM recomputes at least the last prompt token, so a hit is at most (tokens - 1) long.
      const bs = hasher.blockSize;
      const hit = this.prefixCache.match(hasher.blocks, Math.floor((tokens - 1) / bs));
      job.cachedTokens = hit * bs;
      metrics.prefixCacheQueries += tokens;
      metrics.prefixCacheHits += job.cachedTokens;
      this.prefixCache.insert(hasher.blocks);
    }
    const { ttftMs, itlMs, prefillMsPerToken } = job.plan;
    const ttft = ttftMs + prefillMsPerToken * (tokens - job.cachedTokens);
    if (job.stream) job.timer = setTimeout(firstToken, ttft, this, job);
    else job.timer = setTimeout(() => this.finishNonStreaming(job), ttft + itlMs * (job.output.tokens - 1));
  }

  private startEmbedding(job: EmbeddingJob): void {
    const tokens = job.request.tokens;
    this.metrics.promptTokens += tokens;
    job.timer = setTimeout(
      () => this.finishEmbedding(job),
      job.plan.ttftMs + job.plan.prefillMsPerToken * tokens,
    );
  }

  private finishEmbedding(job: EmbeddingJob): void {
    job.timer = null;
    if (job.plan.stallAfter !== null) return; // never answers, like a stalled generation
    if (job.plan.errorAfter !== null) {
      sendError(job.res, injectedFailure(job.plan.failStatus ?? 500));
      return this.finish(job, 'error');
    }
    sendJson(job.res, 200, embeddingsBody(job.request, this.modelJson));
    this.finish(job, 'stop');
  }

  /** Ends a job (answered, failed, or left by its client) and frees its slot. */
  finish(j: Job | EmbeddingJob, reason: FinishedReason): void {
    if (j.state === 'done') return;
    if (j.timer) {
      clearTimeout(j.timer);
      j.timer = null;
    }
    // Blocks the answer completed are cached too (vLLM caches full blocks as decoding fills them).
    if (!('request' in j) && j.state === 'running' && j.prompt.hasher !== null)
      this.prefixCache.insert(j.prompt.hasher.blocks);
    this.active.delete(j);
    this.metrics.finish(reason);
    if (reason === 'stop' || reason === 'length')
      this.metrics.e2e.observe((performance.now() - j.arrivedAt) / 1000);
    this.scheduler.remove(j);
    this.checkIdle();
  }

  private finishNonStreaming(job: Job): void {
    job.timer = null;
    if (job.plan.stallAfter !== null) return; // never answers; holds its slot until the client leaves
    if (job.plan.errorAfter !== null) {
      sendError(job.res, injectedFailure(job.plan.failStatus ?? 500));
      return this.finish(job, 'error');
    }
    const metrics = this.metrics;
    const n = job.output.tokens;
    const now = performance.now();
    const ttft = (now - job.arrivedAt - job.plan.itlMs * (n - 1)) / 1000;
    metrics.ttft.observe(Math.max(0, ttft));
    for (let i = 1; i < n; i++) metrics.itl.observe(job.plan.itlMs / 1000);
    metrics.generationTokens += n;

    const gen = new TokenGenerator(job.seed, job.output.fixed);
    const hasher = job.prompt.hasher;
    let text = '';
    for (let i = 0; i < n; i++) {
      gen.next();
      text += gen.raw;
      if (hasher !== null) hasher.push(gen.id);
    }
    const body =
      job.kind === 'responses'
        ? responsesBody(job, this.modelJson, text)
        : completionBody(job, this.modelJson, text, this.o.enablePromptTokensDetails);
    sendJson(job.res, 200, body);
    this.finish(job, job.output.finishReason === 'length' ? 'length' : 'stop');
  }

  private checkIdle(): void {
    if (this.idleWaiter && this.inFlight === 0) this.idleWaiter();
  }

  /** Resolves when nothing is in flight, or after `graceMs`; then cuts whatever is left. */
  async drain(graceMs: number): Promise<void> {
    if (this.inFlight > 0) {
      let graceTimer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((r) => (this.idleWaiter = r)),
        new Promise<void>((r) => (graceTimer = setTimeout(r, graceMs))),
      ]);
      clearTimeout(graceTimer);
    }
    for (const j of [...this.active]) this.finish(j, 'abort');
  }
}
