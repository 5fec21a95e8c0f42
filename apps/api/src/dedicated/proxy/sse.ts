// Reads the usage out of an OpenAI-format SSE stream as it passes, without holding bytes back:
// complete events go out as soon as they are complete.
//
// The proxy asks the engine for usage on every chunk (vLLM's `stream_options.continuous_usage_stats`),
// so a stream cut short — the client gone, its key revoked, the wall-clock limit — is still metered
// for what was generated up to the cut. What the client did not ask for is removed on the way back,
// byte for byte: the `,"usage":{…}` member of each chunk (vLLM appends it last, so the chunk is the
// one the engine would have sent without it), and the final usage-only chunk (empty `choices`).
// The usage object is kept as text and parsed once, when it is asked for.
//
// The Responses API has no stream options: its usage comes in `response.completed`; a cut Responses
// stream is metered by its `response.output_text.delta` events (one per generated token on vLLM).

export interface Usage {
  promptTokens: number;
  completionTokens: number;
}

export interface TapOptions {
  /** Drop the final usage-only chunk (the client did not ask for `include_usage`). */
  stripFinal: boolean;
  /** Remove the per-chunk usage member (the client did not ask for `continuous_usage_stats`). */
  stripContinuous: boolean;
}

const USAGE = Buffer.from('"usage":');
const EVENT_END = Buffer.from('\n\n');
const EMPTY_CHOICES = Buffer.from('"choices":[]');
const TEXT_DELTA = Buffer.from('event: response.output_text.delta\n');
const OPEN = 0x7b; // {
const CLOSE = 0x7d; // }
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const EMPTY = Buffer.alloc(0);

/** Index of the first `"usage":{` at or after `from`, or -1 (`"usage":null` is skipped). */
function usageObjectAt(buf: Buffer, from: number, to: number): number {
  let i = buf.indexOf(USAGE, from);
  while (i !== -1 && i < to) {
    let j = i + USAGE.length;
    while (buf[j] === 0x20) j++;
    if (buf[j] === OPEN) return i;
    i = buf.indexOf(USAGE, j);
  }
  return -1;
}

/** The index just past the JSON object that starts at `start` (a `{`), or -1 if it does not close. */
function objectEnd(buf: Buffer, start: number, to: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < to; i++) {
    const c = buf[i];
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN) depth++;
    else if (c === CLOSE && --depth === 0) return i + 1;
  }
  return -1;
}

/** OpenAI's usage in a Chat Completions / Completions body, or a Responses object's. */
export function usageOf(body: unknown): Usage | undefined {
  const b = body as { usage?: unknown; response?: { usage?: unknown } } | null;
  return usageFields(b?.usage ?? b?.response?.usage);
}

/**
 * usageOf() of a whole JSON answer, read off its bytes: where the answer names `"usage":` once and
 * an object follows, only that object is parsed (an engine's answer is mostly its text and choices,
 * which the proxy need not decode); otherwise the whole answer is. A `"usage":` inside a JSON string
 * has its quotes escaped, so it is not found here.
 */
export function usageOfAnswer(buf: Buffer): Usage | undefined {
  const at = buf.indexOf(USAGE);
  if (at !== -1 && buf.indexOf(USAGE, at + USAGE.length) === -1 && usageObjectAt(buf, at, at + 1) === at) {
    let start = at + USAGE.length;
    while (buf[start] === 0x20) start++;
    const end = objectEnd(buf, start, buf.length);
    if (end !== -1) {
      try {
        return usageFields(JSON.parse(buf.toString('utf8', start, end)));
      } catch {
        // not JSON after all: the whole answer decides
      }
    }
  }
  try {
    return usageOf(JSON.parse(buf.toString('utf8')));
  } catch {
    return undefined;
  }
}

function usageFields(value: unknown): Usage | undefined {
  const u = value as
    | {
        prompt_tokens?: unknown;
        completion_tokens?: unknown;
        input_tokens?: unknown;
        output_tokens?: unknown;
      }
    | null
    | undefined;
  if (!u) return undefined;
  if (typeof u.prompt_tokens === 'number')
    return {
      promptTokens: u.prompt_tokens,
      completionTokens: typeof u.completion_tokens === 'number' ? u.completion_tokens : 0,
    };
  if (typeof u.input_tokens === 'number')
    return {
      promptTokens: u.input_tokens,
      completionTokens: typeof u.output_tokens === 'number' ? u.output_tokens : 0,
    };
  return undefined;
}

export class SseUsageTap {
  private readonly options: TapOptions;
  private tail: Buffer | undefined;
  /** The latest usage object seen: where its JSON text is (read only when `usage` is asked for). */
  private raw: Buffer | undefined;
  private rawOpen = 0;
  private rawClose = 0;
  private parsed: Usage | undefined;
  /** Responses API text deltas seen (the usage of a cut Responses stream). */
  private deltas = 0;

  constructor(options: TapOptions = { stripFinal: false, stripContinuous: false }) {
    this.options = options;
  }

  /** What the engine reported last (exact at the end; up to the cut for a cut stream). */
  get usage(): Usage | undefined {
    if (this.raw !== undefined) {
      try {
        this.parsed =
          usageFields(JSON.parse(this.raw.toString('utf8', this.rawOpen, this.rawClose))) ?? this.parsed;
      } catch {
        // not JSON: keep what was parsed before
      }
      this.raw = undefined;
    }
    if (this.parsed) return this.parsed;
    return this.deltas ? { promptTokens: 0, completionTokens: this.deltas } : undefined;
  }

  /** The bytes to send now (possibly empty). */
  push(chunk: Buffer): Buffer {
    const buf = this.tail ? Buffer.concat([this.tail, chunk]) : chunk;
    const end = buf.lastIndexOf(EVENT_END);
    if (end === -1) {
      this.tail = buf;
      return EMPTY;
    }
    const cut = end + EVENT_END.length;
    const complete = cut === buf.length ? buf : buf.subarray(0, cut);
    this.tail = cut === buf.length ? undefined : Buffer.from(buf.subarray(cut));
    const first = usageObjectAt(complete, 0, complete.length);
    if (first === -1) {
      if (complete[0] === 0x65 /* e: `event:` lines of the Responses API */) this.countDeltas(complete);
      return complete;
    }
    return this.filter(complete, first);
  }

  /** Whatever is left when the upstream ends (an unterminated last event). */
  end(): Buffer {
    const rest = this.tail ?? EMPTY;
    this.tail = undefined;
    return rest;
  }

  private countDeltas(buf: Buffer): void {
    for (let i = buf.indexOf(TEXT_DELTA); i !== -1; i = buf.indexOf(TEXT_DELTA, i + TEXT_DELTA.length))
      this.deltas++;
  }

  /**
   * Reads each event's usage and cuts out what the client did not ask for: the bytes kept are copied
   * into one new buffer (only when something is cut), without a view per piece.
   */
  private filter(complete: Buffer, first: number): Buffer {
    const { stripFinal, stripContinuous } = this.options;
    let out: Buffer | undefined;
    let written = 0; // bytes in `out`
    let kept = 0; // bytes of `complete` before this index are copied or cut
    let start = 0; // of the current event
    let at = first; // the next usage object at or after `start`, or -1
    let empty = -2; // the next `"choices":[]` at or after `start`, -1 for none (-2: not looked for)
    while (start < complete.length) {
      const stop = complete.indexOf(EVENT_END, start) + EVENT_END.length; // complete ends with one
      if (at !== -1 && at < start) at = usageObjectAt(complete, start, complete.length);
      if (at === -1 || at >= stop) {
        if (complete[start] === 0x65) this.countDeltas(complete.subarray(start, stop));
        start = stop;
        continue;
      }
      const open = complete.indexOf(OPEN, at + USAGE.length);
      const close = objectEnd(complete, open, stop);
      if (close === -1) {
        start = stop;
        continue;
      }
      this.raw = complete;
      this.rawOpen = open;
      this.rawClose = close;
      if (empty === -2 || (empty !== -1 && empty < start)) empty = complete.indexOf(EMPTY_CHOICES, start);
      // Cut [cut, resume): the usage-only chunk that ends a stream, or a chunk's `,"usage":{…}`.
      let cut = -1;
      let resume = -1;
      if (empty !== -1 && empty < stop) {
        if (stripFinal) {
          cut = start;
          resume = stop;
        }
      } else if (stripContinuous && complete[at - 1] === 0x2c /* , */) {
        cut = at - 1;
        resume = close;
      }
      if (cut !== -1) {
        out ??= Buffer.allocUnsafe(complete.length);
        written += complete.copy(out, written, kept, cut);
        kept = resume;
      }
      start = stop;
    }
    if (!out) return complete;
    written += complete.copy(out, written, kept, complete.length);
    return out.subarray(0, written);
  }
}
