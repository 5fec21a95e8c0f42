// The Responses API on vLLM's wire (vllm/entrypoints/openai/serving_responses.py): the response
// object with the request's settings echoed, one output item (a message, or a function call when
// the model calls a tool), and the typed stream events as vLLM writes them:
// `event: <type>\ndata: <json>\n\n`, numbered by `sequence_number`, no `[DONE]`.
//
// Where vLLM 0.11 and OpenAI differ we follow what the official SDK's stream accumulator accepts:
// one stable content_index, the same item ids in the stream and in the final response, and an
// answer cut by max_output_tokens reported as `status: "incomplete"` with `response.incomplete`.
import type { VllmError } from './errors.ts';
import type { Emitter, Job } from './job.ts';
import { flat } from './render.ts';

type Status = 'in_progress' | 'completed' | 'incomplete';

function messageId(job: Job): string {
  return 'msg_' + job.id.slice('resp_'.length);
}

function usageJson(job: Job, output: number): string {
  const p = job.prompt.tokens;
  return (
    `{"input_tokens":${p},"input_tokens_details":{"cached_tokens":${job.cachedTokens}},` +
    `"output_tokens":${output},"output_tokens_details":{"reasoning_tokens":0},"total_tokens":${p + output}}`
  );
}

/** The response object, with the fields of vLLM's ResponsesResponse in its order. */
function responseJson(job: Job, modelJson: string, status: Status, output: string, usage: string): string {
  const e = job.responses!;
  const incomplete = status === 'incomplete' ? '{"reason":"max_output_tokens"}' : 'null';
  const j = (v: unknown) => JSON.stringify(v ?? null);
  return (
    `{"id":"${job.id}","created_at":${job.created},"incomplete_details":${incomplete},` +
    `"instructions":${j(e.instructions)},"metadata":${j(e.metadata)},"model":${modelJson},"object":"response",` +
    `"output":${output},"parallel_tool_calls":${e.parallelToolCalls},"temperature":${j(e.temperature)},` +
    `"tool_choice":${j(e.toolChoice)},"tools":${j(e.tools)},"top_p":${j(e.topP)},"background":false,` +
    `"max_output_tokens":${e.maxOutputTokens},"max_tool_calls":${j(e.maxToolCalls)},"previous_response_id":null,` +
    `"prompt":null,"reasoning":null,"service_tier":${j(e.serviceTier)},"status":"${status}","text":${j(e.text)},` +
    `"top_logprobs":null,"truncation":${j(e.truncation)},"usage":${usage},"user":${j(e.user)}}`
  );
}

function finalStatus(job: Job): Status {
  return job.output.finishReason === 'length' ? 'incomplete' : 'completed';
}

function messageItem(job: Job, status: Status, textJson: string, logprobs: string): string {
  const content =
    textJson === ''
      ? '[]'
      : `[{"annotations":[],"text":${textJson},"type":"output_text","logprobs":${logprobs}}]`;
  return `{"id":"${messageId(job)}","content":${content},"role":"assistant","status":"${status}","type":"message"}`;
}

function callItem(job: Job, status: Status, args: string): string {
  const call = job.output.call!;
  return (
    `{"arguments":${JSON.stringify(args)},"call_id":"${call.callId}","name":${JSON.stringify(call.name)},` +
    `"type":"function_call","id":"${call.itemId}","status":"${status}"}`
  );
}

/** The non-streaming answer: the response with its one output item and usage. */
export function responsesBody(job: Job, modelJson: string, text: string): string {
  const status = finalStatus(job);
  const item = job.output.call
    ? callItem(job, 'completed', job.output.call.arguments)
    : messageItem(job, status, JSON.stringify(text), 'null');
  return responseJson(job, modelJson, status, `[${item}]`, usageJson(job, job.output.tokens));
}

/** One SSE event; `fields` is the JSON body without sequence_number and type. */
function event(job: Job, type: string, fields: string): string {
  return `event: ${type}\ndata: {${fields},"sequence_number":${job.seq++},"type":"${type}"}\n\n`;
}

function opening(job: Job, modelJson: string): string {
  const inProgress = responseJson(job, modelJson, 'in_progress', '[]', 'null');
  return (
    event(job, 'response.created', `"response":${inProgress}`) +
    event(job, 'response.in_progress', `"response":${inProgress}`)
  );
}

function finished(job: Job, modelJson: string, item: string): string {
  const status = finalStatus(job);
  const done = responseJson(job, modelJson, status, `[${item}]`, usageJson(job, job.output.tokens));
  return event(
    job,
    status === 'completed' ? 'response.completed' : 'response.incomplete',
    `"response":${done}`,
  );
}

// An error after the first byte: OpenAI's `error` event, which the SDK raises as an APIError.
function failEvent(job: Job, e: VllmError): string {
  return event(job, 'error', `"code":"${e.type}","message":${JSON.stringify(e.message)},"param":null`);
}

export function responsesTextEmitter(modelJson: string): Emitter {
  return {
    open(job) {
      const id = messageId(job);
      const out =
        opening(job, modelJson) +
        event(
          job,
          'response.output_item.added',
          `"item":${messageItem(job, 'in_progress', '', '')},"output_index":0`,
        ) +
        event(
          job,
          'response.content_part.added',
          `"content_index":0,"item_id":"${id}","output_index":0,"part":{"annotations":[],"text":"","type":"output_text","logprobs":[]}`,
        );
      job.chunkPrefix = 'event: response.output_text.delta\ndata: {"content_index":0,"delta":"';
      job.chunkSuffix = flat(`","item_id":"${id}","logprobs":[],"output_index":0,"sequence_number":`);
      return out;
    },
    token(job, _i, tok) {
      job.textEsc += tok;
      return (
        job.chunkPrefix + tok + job.chunkSuffix + job.seq++ + ',"type":"response.output_text.delta"}\n\n'
      );
    },
    close(job) {
      const id = messageId(job);
      const text = `"${job.textEsc}"`;
      const part = `{"annotations":[],"text":${text},"type":"output_text","logprobs":[]}`;
      const item = messageItem(job, finalStatus(job), text, '[]');
      return (
        event(
          job,
          'response.output_text.done',
          `"content_index":0,"item_id":"${id}","logprobs":[],"output_index":0,"text":${text}`,
        ) +
        event(
          job,
          'response.content_part.done',
          `"content_index":0,"item_id":"${id}","output_index":0,"part":${part}`,
        ) +
        event(job, 'response.output_item.done', `"item":${item},"output_index":0`) +
        finished(job, modelJson, item)
      );
    },
    fail: failEvent,
  };
}

/** A function call: the item appears once the name is written, then its arguments stream. */
export function responsesCallEmitter(modelJson: string): Emitter {
  return {
    open: (job) => opening(job, modelJson),
    token(job, i, _tok) {
      const call = job.output.call!;
      const fixed = job.output.fixed!;
      const start = i === 0 ? 0 : fixed[i - 1]!.end;
      const end = fixed[i]!.end;
      if (start < call.nameEnd && end >= call.nameEnd)
        return event(
          job,
          'response.output_item.added',
          `"item":${callItem(job, 'in_progress', '')},"output_index":0`,
        );
      const lo = Math.max(start, call.argsStart);
      const hi = Math.min(end, call.argsEnd);
      if (lo >= hi) return '';
      return event(
        job,
        'response.function_call_arguments.delta',
        `"delta":${JSON.stringify(call.text.slice(lo, hi))},"item_id":"${call.itemId}","output_index":0`,
      );
    },
    close(job) {
      const call = job.output.call!;
      const item = callItem(job, 'completed', call.arguments);
      return (
        event(
          job,
          'response.function_call_arguments.done',
          `"arguments":${JSON.stringify(call.arguments)},"item_id":"${call.itemId}","name":${JSON.stringify(call.name)},"output_index":0`,
        ) +
        event(job, 'response.output_item.done', `"item":${item},"output_index":0`) +
        finished(job, modelJson, item)
      );
    },
    fail: failEvent,
  };
}
