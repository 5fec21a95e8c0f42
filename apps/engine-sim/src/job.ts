// The shapes shared by request parsing, the scheduler, the engine and the stream pump.
import type http from 'node:http';
import type { PromptInfo, TokenGenerator } from './text.ts';

export type Kind = 'chat' | 'completion';

/** What one request will experience: the latency and failure knobs after x-sim-* overrides. */
export interface Plan {
  ttftMs: number;
  itlMs: number;
  /** Natural answer length (`--output-tokens`, `x-sim-output-tokens`). */
  outputTokens: number;
  failStatus: number | null;
  hang: boolean;
  stallAfter: number | null;
  errorAfter: number | null;
}

/** A validated generation request: what to generate, before scheduling. */
export interface GenerationRequest {
  kind: Kind;
  prompt: PromptInfo;
  stream: boolean;
  includeUsage: boolean;
  maxTokens: number | null;
  ignoreEos: boolean;
  seed: number | null;
}

export type JobState = 'queued' | 'running' | 'done';

export interface Job {
  kind: Kind;
  res: http.ServerResponse;
  stream: boolean;
  includeUsage: boolean;
  id: string;
  created: number;
  prompt: PromptInfo;
  outputTokens: number;
  finishReason: 'stop' | 'length';
  seed: number;
  plan: Plan;
  arrivedAt: number;
  // run state
  state: JobState;
  timer: NodeJS.Timeout | null;
  emitted: number;
  firstTokenAt: number;
  lastTokenAt: number;
  gen: TokenGenerator | null;
  chunkPrefix: string;
  chunkSuffix: string;
  paused: boolean;
}
