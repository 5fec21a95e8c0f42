// The streaming side of a running request: SSE chunks on vLLM's schedule (first token at TTFT, then
// one every ITL, or as fast as the socket drains at ITL 0), backpressure, stalls and the mid-stream
// error frame.
import { performance } from 'node:perf_hooks';
import { errorBody, injectedFailure } from './errors.ts';
import type { Job } from './job.ts';
import type { EngineMetrics, FinishedReason } from './metrics.ts';
import { TokenGenerator } from './text.ts';

/** Tokens written per write() when inter-token latency is 0, so other streams get the event loop. */
const ZERO_ITL_BATCH = 256;

/** What the stream needs from the engine that runs it. */
export interface StreamHost {
  readonly metrics: EngineMetrics;
  /** The served model name, JSON-encoded once. */
  readonly modelJson: string;
  finish(job: Job, reason: FinishedReason): void;
}

/** The first token is due: send the opening chunk(s) and start pumping. */
export function firstToken(host: StreamHost, job: Job): void {
  job.timer = null;
  const now = performance.now();
  job.firstTokenAt = now;
  job.lastTokenAt = now;
  host.metrics.ttft.observe((now - job.arrivedAt) / 1000);
  job.gen = new TokenGenerator(job.seed);
  const head = `data: {"id":"${job.id}","object":"${job.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion'}","created":${job.created},"model":${host.modelJson},"choices":[{"index":0,`;
  if (job.kind === 'chat') {
    job.chunkPrefix = head + '"delta":{"content":"';
    job.chunkSuffix = '"},"logprobs":null,"finish_reason":null}]}\n\n';
    job.res.write(
      head + '"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n',
    );
  } else {
    job.chunkPrefix = head + '"text":"';
    job.chunkSuffix = '","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n';
  }
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
  const { itlMs, stallAfter, errorAfter } = job.plan;
  const now = performance.now();
  let limit = job.outputTokens;
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
  const last = job.outputTokens - 1;
  for (let i = job.emitted; i < due; i++) {
    const tok = gen.next();
    if (i === last) out += finalChunk(job, tok);
    else out += job.chunkPrefix + tok + job.chunkSuffix;
  }
  const n = due - job.emitted;
  if (n > 0) {
    const metrics = host.metrics;
    if (job.emitted > 0) metrics.itl.observe((now - job.lastTokenAt) / 1000);
    for (let i = 1; i < n; i++) metrics.itl.observe(0);
    job.lastTokenAt = now;
    job.emitted = due;
    metrics.generationTokens += n;
  }

  if (job.emitted === job.outputTokens) {
    if (job.includeUsage) out += usageChunk(host, job);
    out += 'data: [DONE]\n\n';
    job.res.end(out);
    host.finish(job, job.finishReason);
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

// vLLM reports an error after the first byte as one `data: {"error": ...}` frame, then `[DONE]`.
function failMidStream(host: StreamHost, job: Job, out: string): void {
  const e = injectedFailure(job.plan.failStatus ?? 500);
  job.res.end(out + `data: ${errorBody(e)}\n\ndata: [DONE]\n\n`);
  host.finish(job, 'error');
}

function finalChunk(job: Job, tok: string): string {
  if (job.kind === 'chat')
    return (
      job.chunkPrefix +
      tok +
      `"},"logprobs":null,"finish_reason":"${job.finishReason}","stop_reason":null}]}\n\n`
    );
  return (
    job.chunkPrefix +
    tok +
    `","logprobs":null,"finish_reason":"${job.finishReason}","stop_reason":null}]}\n\n`
  );
}

function usageChunk(host: StreamHost, job: Job): string {
  const object = job.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
  const p = job.prompt.tokens;
  const c = job.outputTokens;
  const usage = `{"prompt_tokens":${p},"total_tokens":${p + c},"completion_tokens":${c}}`;
  return `data: {"id":"${job.id}","object":"${object}","created":${job.created},"model":${host.modelJson},"choices":[],"usage":${usage}}\n\n`;
}
