// The engine: turns validated requests into jobs, schedules them, answers non-streaming requests,
// hands streams to the pump, and keeps the accounting (metrics, in-flight set for draining).
import { randomUUID } from 'node:crypto';
import type http from 'node:http';
import { performance } from 'node:perf_hooks';
import type { EngineSimOptions } from './config.ts';
import { injectedFailure } from './errors.ts';
import { sendError, sendJson } from './http.ts';
import type { GenerationRequest, Job, Plan } from './job.ts';
import { EngineMetrics, type FinishedReason } from './metrics.ts';
import { Scheduler } from './scheduler.ts';
import { firstToken, type StreamHost } from './stream.ts';
import { generateText, seedFor } from './text.ts';

export class Engine implements StreamHost {
  readonly metrics: EngineMetrics;
  readonly modelJson: string;
  private readonly o: EngineSimOptions;
  private readonly scheduler: Scheduler<Job>;
  private readonly active = new Set<Job>(); // queued + running
  private readonly hung = new Set<http.ServerResponse>();
  private idleWaiter: (() => void) | null = null;

  constructor(o: EngineSimOptions) {
    this.o = o;
    this.metrics = new EngineMetrics(o.servedModelNames[0]!, o.maxNumSeqs);
    this.modelJson = JSON.stringify(o.servedModelNames[0]!);
    this.scheduler = new Scheduler<Job>(o.maxNumSeqs, this.metrics, (job) => this.start(job));
  }

  /** Requests accepted and not yet answered (queued, running or hung). */
  get inFlight(): number {
    return this.active.size + this.hung.size;
  }

  /** Runs a validated generation request under its plan, answering on `res`. */
  generate(r: GenerationRequest, plan: Plan, res: http.ServerResponse, arrivedAt: number): void {
    if (plan.failStatus !== null && plan.errorAfter === null)
      return sendError(res, injectedFailure(plan.failStatus));
    if (plan.hang) {
      this.hung.add(res);
      res.on('close', () => {
        this.hung.delete(res);
        this.checkIdle();
      });
      return;
    }

    // Output length: the model's "natural" length unless max_tokens cuts it short (finish_reason
    // "length"); `ignore_eos` (vLLM's benchmark switch) generates exactly max_tokens.
    const { prompt, maxTokens } = r;
    let natural = plan.outputTokens;
    if (r.ignoreEos && maxTokens !== null) natural = maxTokens;
    natural = Math.min(natural, this.o.maxModelLen - prompt.tokens);
    const outputTokens = maxTokens !== null ? Math.min(maxTokens, natural) : natural;
    const finishReason =
      maxTokens !== null && outputTokens >= maxTokens ? 'length' : outputTokens < natural ? 'length' : 'stop';

    const job: Job = {
      kind: r.kind,
      res,
      stream: r.stream,
      includeUsage: r.includeUsage,
      id: (r.kind === 'chat' ? 'chatcmpl-' : 'cmpl-') + randomUUID().replaceAll('-', ''),
      created: Math.floor(Date.now() / 1000),
      prompt,
      outputTokens,
      finishReason,
      seed: seedFor(prompt.text, r.seed),
      plan,
      arrivedAt,
      state: 'queued',
      timer: null,
      emitted: 0,
      firstTokenAt: 0,
      lastTokenAt: 0,
      gen: null,
      chunkPrefix: '',
      chunkSuffix: '',
      paused: false,
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

  private start(job: Job): void {
    this.metrics.promptTokens += job.prompt.tokens;
    const { ttftMs, itlMs } = job.plan;
    if (job.stream) job.timer = setTimeout(firstToken, ttftMs, this, job);
    else job.timer = setTimeout(() => this.finishNonStreaming(job), ttftMs + itlMs * (job.outputTokens - 1));
  }

  finish(job: Job, reason: FinishedReason): void {
    if (job.state === 'done') return;
    if (job.timer) {
      clearTimeout(job.timer);
      job.timer = null;
    }
    this.active.delete(job);
    this.metrics.finish(reason);
    if (reason === 'stop' || reason === 'length')
      this.metrics.e2e.observe((performance.now() - job.arrivedAt) / 1000);
    this.scheduler.remove(job);
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
    const now = performance.now();
    const ttft = (now - job.arrivedAt - job.plan.itlMs * (job.outputTokens - 1)) / 1000;
    metrics.ttft.observe(Math.max(0, ttft));
    for (let i = 1; i < job.outputTokens; i++) metrics.itl.observe(job.plan.itlMs / 1000);
    metrics.generationTokens += job.outputTokens;
    const text = JSON.stringify(generateText(job.seed, job.outputTokens));
    const p = job.prompt.tokens;
    const c = job.outputTokens;
    const usage = `{"prompt_tokens":${p},"total_tokens":${p + c},"completion_tokens":${c},"prompt_tokens_details":null}`;
    const m = this.modelJson;
    let body: string;
    if (job.kind === 'chat') {
      body =
        `{"id":"${job.id}","object":"chat.completion","created":${job.created},"model":${m},` +
        `"choices":[{"index":0,"message":{"role":"assistant","content":${text},"refusal":null,"annotations":null,` +
        `"audio":null,"function_call":null,"reasoning":null},"logprobs":null,"finish_reason":"${job.finishReason}",` +
        `"stop_reason":null,"token_ids":null}],"service_tier":null,"system_fingerprint":null,"usage":${usage},` +
        `"prompt_logprobs":null,"prompt_token_ids":null,"kv_transfer_params":null}`;
    } else {
      body =
        `{"id":"${job.id}","object":"text_completion","created":${job.created},"model":${m},` +
        `"choices":[{"index":0,"text":${text},"logprobs":null,"finish_reason":"${job.finishReason}",` +
        `"stop_reason":null,"token_ids":null,"prompt_logprobs":null,"prompt_token_ids":null}],` +
        `"service_tier":null,"system_fingerprint":null,"usage":${usage},"kv_transfer_params":null}`;
    }
    sendJson(job.res, 200, body);
    this.finish(job, job.finishReason);
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
    for (const job of [...this.active]) this.finish(job, 'abort');
  }
}
