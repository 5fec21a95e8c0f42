// The shapes shared by request parsing, the scheduler, the engine, the renderers and the stream pump.
import type http from 'node:http';
import type { VllmError } from './errors.ts';
import type { Piece, PromptInfo, TokenGenerator } from './text.ts';
import type { ToolChoice, ToolPlan, WrittenCall } from './tools.ts';

export type Kind = 'chat' | 'completion' | 'responses';

/** What one request will experience: the latency and failure knobs after x-sim-* overrides. */
export interface Plan {
  ttftMs: number;
  itlMs: number;
  prefillMsPerToken: number;
  /** Natural answer length (`--output-tokens`, `x-sim-output-tokens`). */
  outputTokens: number;
  failStatus: number | null;
  hang: boolean;
  stallAfter: number | null;
  errorAfter: number | null;
}

/** Request fields a Responses API answer echoes back. */
export interface ResponsesEcho {
  instructions: string | null;
  metadata: unknown;
  parallelToolCalls: boolean;
  temperature: number;
  topP: number;
  toolChoice: unknown;
  tools: unknown[];
  text: unknown;
  user: string | null;
  serviceTier: string;
  truncation: string;
  maxToolCalls: number | null;
  /** max_output_tokens, or what is left of the context (vLLM's default). */
  maxOutputTokens: number;
}

/** A validated generation request: what to generate, before scheduling. */
export interface GenerationRequest {
  kind: Kind;
  prompt: PromptInfo;
  stream: boolean;
  includeUsage: boolean;
  /** vLLM's stream_options.continuous_usage_stats: usage on every chunk (needs include_usage). */
  continuousUsage: boolean;
  maxTokens: number | null;
  ignoreEos: boolean;
  seed: number | null;
  /** What the model does about tools this turn. */
  tools: ToolPlan;
  /** For the Responses API. */
  responses: ResponsesEcho | null;
}

export type { ToolChoice };

/** A tool call being made: the written call and the ids it is reported under. */
export interface CallOutput extends WrittenCall {
  name: string;
  arguments: string;
  /** `chatcmpl-tool-…` (Chat Completions) or `call_…` (Responses call_id). */
  callId: string;
  /** Responses output item id (`fc_…`). */
  itemId: string;
}

/** What the model answers, decided when the request is accepted. */
export interface Output {
  /** Tokens to generate. */
  tokens: number;
  /** Leading tokens with fixed text (tool results, a written tool call); generated words follow. */
  fixed: readonly Piece[] | null;
  /** Set when the answer is a tool call (then `fixed` is the written call). */
  call: CallOutput | null;
  /** As the API reports it. */
  finishReason: 'stop' | 'length' | 'tool_calls';
}

/** Renders a stream's bytes; one per API and answer type (see render.ts, responses.ts). */
export interface Emitter {
  /** Bytes sent when the first token is due, before it. */
  open(job: Job): string;
  /** The bytes carrying token `i` (0-based) whose JSON-escaped text is `tok`; '' shows nothing. */
  token(job: Job, i: number, tok: string): string;
  /** Bytes after the last token (finish, usage, terminator). */
  close(job: Job): string;
  /** Bytes that end the stream after an error. */
  fail(job: Job, e: VllmError): string;
}

export type JobState = 'queued' | 'running' | 'done';

export interface Job {
  kind: Kind;
  res: http.ServerResponse;
  stream: boolean;
  includeUsage: boolean;
  continuousUsage: boolean;
  id: string;
  created: number;
  prompt: PromptInfo;
  output: Output;
  seed: number;
  plan: Plan;
  arrivedAt: number;
  responses: ResponsesEcho | null;
  emitter: Emitter | null;
  // run state
  state: JobState;
  timer: NodeJS.Timeout | null;
  /** Prompt tokens found in the prefix cache when the job was scheduled. */
  cachedTokens: number;
  emitted: number;
  firstTokenAt: number;
  lastTokenAt: number;
  gen: TokenGenerator | null;
  paused: boolean;
  /** Set by the emitter: every token but the last is chunkPrefix + token + chunkSuffix. */
  plain: boolean;
  /** Per-stream scratch for emitters: chunk prefix/suffix, event sequence number, text so far. */
  chunkPrefix: string;
  chunkSuffix: string;
  seq: number;
  textEsc: string;
}
