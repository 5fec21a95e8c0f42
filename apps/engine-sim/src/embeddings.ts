// Deterministic embeddings: a bag-of-words feature hash. Every (lower-cased) token adds a fixed
// pseudo-random vector seeded by its id, and the sum is L2-normalised, so equal inputs give equal
// vectors and texts that share words point the same way (cosine similarity > 0) — enough for tests
// of semantic routing without a model. `dimensions` truncates and renormalises (Matryoshka-style).
import { randomUUID } from 'node:crypto';
import { scanTokens, type TokenSink } from './text.ts';

/** An input to embed: a text or token ids. */
export type EmbeddingInput = string | readonly number[];

function mulberry32(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), s | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The token ids an input contributes (a text's tokens, lower-cased; ids as they are). */
function idsOf(input: EmbeddingInput): number[] {
  if (typeof input !== 'string') return input.map((id) => id >>> 0);
  const ids: number[] = [];
  const sink: TokenSink = { push: (id) => ids.push(id) };
  scanTokens(input.toLowerCase(), sink);
  return ids;
}

/** The unit vector of an input, as float32 values (what vLLM returns), `dimensions` long. */
export function embed(input: EmbeddingInput, dimensions: number): Float32Array {
  const ids = idsOf(input);
  if (ids.length === 0) ids.push(0); // an empty input still embeds its special tokens
  const sum = new Float64Array(dimensions);
  for (const id of ids) {
    const rand = mulberry32(id ^ 0x5f3759df);
    for (let d = 0; d < dimensions; d++) sum[d]! += rand() * 2 - 1;
  }
  let norm = 0;
  for (let d = 0; d < dimensions; d++) norm += sum[d]! * sum[d]!;
  norm = Math.sqrt(norm) || 1;
  const out = new Float32Array(dimensions);
  for (let d = 0; d < dimensions; d++) out[d] = sum[d]! / norm;
  return out;
}

/** vLLM's `encoding_format: "base64"`: the float32 values, little-endian, base64-encoded. */
export function base64Of(v: Float32Array): string {
  const bytes = Buffer.alloc(v.length * 4);
  for (let i = 0; i < v.length; i++) bytes.writeFloatLE(v[i]!, i * 4);
  return bytes.toString('base64');
}

/** A float32 value as Python prints it (shortest repr of the float32 widened to a double). */
function floatJson(x: number): string {
  return Number.isInteger(x) ? `${x}.0` : String(x);
}

export interface EmbeddingRequest {
  inputs: EmbeddingInput[];
  /** Tokens of all inputs (usage.prompt_tokens). */
  tokens: number;
  encoding: 'float' | 'base64';
  dimensions: number;
}

/** vLLM's EmbeddingResponse for the request. */
export function embeddingsBody(r: EmbeddingRequest, modelJson: string): string {
  const data = r.inputs.map((input, index) => {
    const v = embed(input, r.dimensions);
    const embedding =
      r.encoding === 'base64' ? `"${base64Of(v)}"` : `[${Array.from(v, floatJson).join(',')}]`;
    return `{"index":${index},"object":"embedding","embedding":${embedding}}`;
  });
  const id = 'embd-' + randomUUID().replaceAll('-', '');
  const usage = `{"prompt_tokens":${r.tokens},"total_tokens":${r.tokens},"completion_tokens":0,"prompt_tokens_details":null}`;
  return (
    `{"id":"${id}","object":"list","created":${Math.floor(Date.now() / 1000)},"model":${modelJson},` +
    `"data":[${data.join(',')}],"usage":${usage}}`
  );
}
