// Chat Completions and Completions on vLLM's wire: the streamed chunks (as emitters) and the
// non-streaming bodies, written as strings because these are the hot path of every benchmark.
import { errorBody } from './errors.ts';
import type { Emitter, Job } from './job.ts';

/**
 * A string V8 holds as one flat sequence. The per-token chunks are prefix + token + suffix; when
 * the prefix or suffix is itself a concatenation (a rope), every write of a batch walks those ropes
 * again, which cost ~10 % of the simulator's CPU per token.
 */
export function flat(s: string): string {
  return Buffer.from(s, 'utf8').toString('utf8');
}

/** vLLM's UsageInfo as streamed (exclude_unset: no prompt_tokens_details unless enabled). */
function usageJson(prompt: number, completion: number, cached: number | null): string {
  const details = cached === null ? '' : `,"prompt_tokens_details":{"cached_tokens":${cached}}`;
  return `{"prompt_tokens":${prompt},"total_tokens":${prompt + completion},"completion_tokens":${completion}${details}}`;
}

/** The usage of a finished job; `cachedTokens` only with --enable-prompt-tokens-details. */
export function finalUsage(job: Job, completion: number, details: boolean): string {
  return usageJson(job.prompt.tokens, completion, details ? job.cachedTokens : null);
}

/** `,"usage":{…}` on every chunk under stream_options.continuous_usage_stats. */
function continuous(job: Job, completion: number): string {
  return job.continuousUsage ? `,"usage":${usageJson(job.prompt.tokens, completion, null)}` : '';
}

function chunkHead(job: Job, modelJson: string): string {
  const object = job.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
  return `data: {"id":"${job.id}","object":"${object}","created":${job.created},"model":${modelJson},"choices":[`;
}

/** After the last token: the usage chunk when asked for, then `[DONE]`. */
function closing(job: Job, modelJson: string, details: boolean): string {
  const usage = job.includeUsage
    ? `${chunkHead(job, modelJson)}],"usage":${finalUsage(job, job.output.tokens, details)}}\n\n`
    : '';
  return usage + 'data: [DONE]\n\n';
}

// vLLM reports an error after the first byte as one `data: {"error": ...}` frame, then `[DONE]`.
const failFrame: Emitter['fail'] = (_job, e) => `data: ${errorBody(e)}\n\ndata: [DONE]\n\n`;

/** The opening role chunk of a chat stream. */
function roleChunk(job: Job, head: string): string {
  return (
    head +
    '{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]' +
    continuous(job, 0) +
    '}\n\n'
  );
}

/**
 * Text streamed as chat deltas or completion text: every token chunk is the same prefix and suffix
 * around the token (the stream pump's fast path, `job.plain`), except the last with its finish
 * reason, and except under continuous_usage_stats.
 */
export function textEmitter(kind: 'chat' | 'completion', modelJson: string, details: boolean): Emitter {
  const chat = kind === 'chat';
  const field = chat ? '{"index":0,"delta":{"content":"' : '{"index":0,"text":"';
  const close = chat ? '"}' : '"';
  const running = chat
    ? ',"logprobs":null,"finish_reason":null}]'
    : ',"logprobs":null,"finish_reason":null,"stop_reason":null}]';
  const suffix = flat(close + running + '}\n\n');
  return {
    open(job) {
      const head = chunkHead(job, modelJson);
      job.chunkPrefix = flat(head + field);
      job.chunkSuffix = suffix;
      job.plain = !job.continuousUsage;
      return chat ? roleChunk(job, head) : '';
    },
    token(job, i, tok) {
      if (i === job.output.tokens - 1)
        return (
          job.chunkPrefix +
          tok +
          close +
          `,"logprobs":null,"finish_reason":"${job.output.finishReason}","stop_reason":null}]` +
          continuous(job, i + 1) +
          '}\n\n'
        );
      if (job.continuousUsage)
        return job.chunkPrefix + tok + close + running + continuous(job, i + 1) + '}\n\n';
      return job.chunkPrefix + tok + job.chunkSuffix;
    },
    close: (job) => closing(job, modelJson, details),
    fail: failFrame,
  };
}

/**
 * A tool call streamed as vLLM's Hermes parser streams it: nothing while the model writes the
 * opening tag and the name, then one delta with the call id and name, then the arguments as they
 * are written, then a finish chunk with `finish_reason: "tool_calls"`.
 */
export function chatCallEmitter(modelJson: string, details: boolean): Emitter {
  return {
    open(job) {
      const head = chunkHead(job, modelJson);
      job.chunkPrefix = head + '{"index":0,"delta":';
      return roleChunk(job, head);
    },
    token(job, i, _tok) {
      const call = job.output.call!;
      const fixed = job.output.fixed!;
      const start = i === 0 ? 0 : fixed[i - 1]!.end;
      const end = fixed[i]!.end;
      let delta: string;
      if (start < call.nameEnd && end >= call.nameEnd)
        delta = `{"tool_calls":[{"id":"${call.callId}","type":"function","index":0,"function":{"name":${JSON.stringify(call.name)}}}]}`;
      else {
        const lo = Math.max(start, call.argsStart);
        const hi = Math.min(end, call.argsEnd);
        if (lo >= hi) return '';
        delta = `{"tool_calls":[{"index":0,"function":{"arguments":${JSON.stringify(call.text.slice(lo, hi))}}}]}`;
      }
      return (
        job.chunkPrefix + delta + ',"logprobs":null,"finish_reason":null}]' + continuous(job, i + 1) + '}\n\n'
      );
    },
    close(job) {
      const n = job.output.tokens;
      return (
        job.chunkPrefix +
        '{},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null}]' +
        continuous(job, n) +
        '}\n\n' +
        closing(job, modelJson, details)
      );
    },
    fail: failFrame,
  };
}

/** The non-streaming body of a chat or text completion whose answer is `text`. */
export function completionBody(job: Job, modelJson: string, text: string, details: boolean): string {
  const c = job.output.tokens;
  const usage = details
    ? finalUsage(job, c, true)
    : finalUsage(job, c, false).slice(0, -1) + ',"prompt_tokens_details":null}';
  const fr = job.output.finishReason;
  const head = `{"id":"${job.id}","object":"${job.kind === 'chat' ? 'chat.completion' : 'text_completion'}","created":${job.created},"model":${modelJson},`;
  if (job.kind === 'completion')
    return (
      head +
      `"choices":[{"index":0,"text":${JSON.stringify(text)},"logprobs":null,"finish_reason":"${fr}",` +
      `"stop_reason":null,"token_ids":null,"prompt_logprobs":null,"prompt_token_ids":null}],` +
      `"service_tier":null,"system_fingerprint":null,"usage":${usage},"kv_transfer_params":null}`
    );
  const call = job.output.call;
  const content = call ? 'null' : JSON.stringify(text);
  const toolCalls = call
    ? `[{"id":"${call.callId}","type":"function","function":{"name":${JSON.stringify(call.name)},"arguments":${JSON.stringify(call.arguments)}}}]`
    : '[]';
  return (
    head +
    `"choices":[{"index":0,"message":{"role":"assistant","content":${content},"refusal":null,"annotations":null,` +
    `"audio":null,"function_call":null,"tool_calls":${toolCalls},"reasoning":null},"logprobs":null,"finish_reason":"${fr}",` +
    `"stop_reason":null,"token_ids":null}],"service_tier":null,"system_fingerprint":null,"usage":${usage},` +
    `"prompt_logprobs":null,"prompt_token_ids":null,"kv_transfer_params":null}`
  );
}
