// The streaming side of a running request: tokens on vLLM's schedule (first at TTFT, then one every
// ITL, or as fast as the socket drains at ITL 0), rendered by the job's emitter, with backpressure,
// stalls and the mid-stream error. Every token written is counted in `vllm:generation_tokens_total`
// at once, so a stream the client cuts has counted exactly what was sent.
import { performance } from 'node:perf_hooks';
import { injectedFailure } from './errors.ts';
import type { Job } from './job.ts';
import type { EngineMetrics, FinishedReason } from './metrics.ts';
import { TokenGenerator } from './text.ts';

/** Tokens written per write() when inter-token latency is 0, so other streams get the event loop. */
const ZERO_ITL_BATCH = 256;

/** What the stream needs from the engine that runs it. */
export interface StreamHost {
  readonly metrics: EngineMetrics;
  finish(job: Job, reason: FinishedReason): void;
}

/** The first token is due: send the opening bytes and start pumping. */
export function firstToken(host: StreamHost, job: Job): void {
  job.timer = null;
  const now = performance.now();
  job.firstTokenAt = now;
  job.lastTokenAt = now;
  host.metrics.ttft.observe((now - job.arrivedAt) / 1000);
  job.gen = new TokenGenerator(job.seed, job.output.fixed);
  const head = job.emitter!.open(job);
  if (head.length > 0) job.res.write(head);
  pump(host, job);
  if (job.state === 'running' && job.plan.itlMs > 0 && !stalled(job) && job.timer === null)
    job.timer = setInterval(pump, job.plan.itlMs, host, job);
}

function stalled(job: Job): boolean {
  return job.plan.stallAfter !== null && job.emitted >= job.plan.stallAfter;
}

/** Writes every token that is due by now (a batch at ITL 0), then ends, stalls or fails as planned. */
function pump(host: StreamHost, job: Job): void {
  if (job.state !== 'running' || job.paused) return;
  if (job.res.destroyed) return host.finish(job, 'abort'); // gone before 'close' was delivered
  const { itlMs, stallAfter, errorAfter } = job.plan;
  const total = job.output.tokens;
  const now = performance.now();
  let limit = total;
  if (stallAfter !== null && stallAfter < limit) limit = stallAfter;
  if (errorAfter !== null && errorAfter < limit) limit = errorAfter;
  let due: number;
  if (itlMs === 0) due = Math.min(limit, job.emitted + ZERO_ITL_BATCH);
  else due = Math.min(limit, Math.floor((now - job.firstTokenAt) / itlMs) + 1);
  if (due <= job.emitted) {
    if (errorAfter !== null && job.emitted >= errorAfter) failMidStream(host, job, '');
    return; // not due yet, or stalled
  }

  let out = '';
  const gen = job.gen!;
  const emitter = job.emitter!;
  const hasher = job.prompt.hasher;
  if (job.plain) {
    // The hot path of every benchmark: no call per token.
    const last = total - 1;
    const prefix = job.chunkPrefix;
    const suffix = job.chunkSuffix;
    for (let i = job.emitted; i < due; i++) {
      const tok = gen.next();
      if (hasher !== null) hasher.push(gen.id);
      out += i === last ? emitter.token(job, i, tok) : prefix + tok + suffix;
    }
  } else
    for (let i = job.emitted; i < due; i++) {
      const tok = gen.next();
      if (hasher !== null) hasher.push(gen.id);
      out += emitter.token(job, i, tok);
    }
  const n = due - job.emitted;
  const metrics = host.metrics;
  if (job.emitted > 0) metrics.itl.observe((now - job.lastTokenAt) / 1000);
  for (let i = 1; i < n; i++) metrics.itl.observe(0);
  job.lastTokenAt = now;
  job.emitted = due;
  metrics.generationTokens += n;

  if (job.emitted === total) {
    job.res.end(out + emitter.close(job));
    host.finish(job, job.output.finishReason === 'length' ? 'length' : 'stop');
    return;
  }
  if (errorAfter !== null && job.emitted >= errorAfter) return failMidStream(host, job, out);
  const ok = out.length > 0 ? job.res.write(out) : true;
  if (stallAfter !== null && job.emitted >= stallAfter) {
    // Go silent with the connection open and the slot held, like a wedged sequence.
    if (job.timer) clearInterval(job.timer);
    job.timer = null;
    return;
  }
  if (!ok) {
    job.paused = true;
    job.res.once('drain', () => {
      job.paused = false;
      if (itlMs === 0) pump(host, job);
    });
  } else if (itlMs === 0) {
    setImmediate(pump, host, job); // harmless if the job ends first: pump() checks the state
  }
}

function failMidStream(host: StreamHost, job: Job, out: string): void {
  job.res.end(out + job.emitter!.fail(job, injectedFailure(job.plan.failStatus ?? 500)));
  host.finish(job, 'error');
}
