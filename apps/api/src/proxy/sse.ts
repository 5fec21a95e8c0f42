// Reads the usage out of an OpenAI-format SSE stream as it passes, without holding bytes back:
// complete events go out as soon as they are complete. Only events that carry a usage object are
// parsed. When the proxy asked the engine for usage on the client's behalf, that usage-only event
// (empty `choices`) is dropped, so the client sees the stream it asked for.

export interface Usage {
  promptTokens: number;
  completionTokens: number;
}

const USAGE = Buffer.from('"usage":');
const EVENT_END = Buffer.from('\n\n');

function hasUsageObject(buf: Buffer): boolean {
  let i = buf.indexOf(USAGE);
  while (i !== -1) {
    let j = i + USAGE.length;
    while (buf[j] === 0x20) j++;
    if (buf[j] === 0x7b /* { */) return true;
    i = buf.indexOf(USAGE, j);
  }
  return false;
}

export function usageOf(body: unknown): Usage | undefined {
  const u = (body as { usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } } | null)?.usage;
  if (!u || typeof u.prompt_tokens !== 'number') return undefined;
  return {
    promptTokens: u.prompt_tokens,
    completionTokens: typeof u.completion_tokens === 'number' ? u.completion_tokens : 0,
  };
}

export class SseUsageTap {
  usage: Usage | undefined;
  private tail: Buffer | undefined;

  constructor(private readonly stripUsageEvent: boolean) {}

  /** The bytes to send now (possibly empty). */
  push(chunk: Buffer): Buffer {
    const buf = this.tail ? Buffer.concat([this.tail, chunk]) : chunk;
    const end = buf.lastIndexOf(EVENT_END);
    if (end === -1) {
      this.tail = buf;
      return Buffer.alloc(0);
    }
    const cut = end + EVENT_END.length;
    const complete = cut === buf.length ? buf : buf.subarray(0, cut);
    this.tail = cut === buf.length ? undefined : Buffer.from(buf.subarray(cut));
    return hasUsageObject(complete) ? this.filter(complete) : complete;
  }

  /** Whatever is left when the upstream ends (an unterminated last event). */
  end(): Buffer {
    const rest = this.tail ?? Buffer.alloc(0);
    this.tail = undefined;
    return rest;
  }

  private filter(complete: Buffer): Buffer {
    const kept: string[] = [];
    let changed = false;
    for (const event of complete.toString('utf8').split('\n\n')) {
      if (!event) continue;
      if (event.includes('"usage"')) {
        const data = event
          .split('\n')
          .filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).trimStart())
          .join('\n');
        try {
          const parsed = JSON.parse(data) as { choices?: unknown[] };
          const usage = usageOf(parsed);
          if (usage) this.usage = usage;
          if (usage && this.stripUsageEvent && Array.isArray(parsed.choices) && parsed.choices.length === 0) {
            changed = true;
            continue;
          }
        } catch {
          // not JSON: pass it through untouched
        }
      }
      kept.push(event);
    }
    if (!changed) return complete;
    return Buffer.from(kept.map((e) => e + '\n\n').join(''));
  }
}
