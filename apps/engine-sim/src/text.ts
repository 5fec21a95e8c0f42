// Deterministic stand-ins for a tokenizer, a chat template and a model: stable token counts for
// `usage`, token ids for prefix-cache hashing, and output text that depends only on (prompt, seed)
// so tests can assert content.

function isWordChar(c: number): boolean {
  return (
    (c >= 48 && c <= 57) || // 0-9
    (c >= 65 && c <= 90) || // A-Z
    (c >= 97 && c <= 122) || // a-z
    c === 95 || // _
    c >= 128 // any non-ASCII code unit counts as part of a word
  );
}

function isSpace(c: number): boolean {
  return c === 32 || (c >= 9 && c <= 13);
}

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/** Receives each token of a scanned text: its id and where it sits in the text. */
export interface TokenSink {
  push(id: number, start: number, end: number): void;
}

/**
 * The tokenizer: each run of word characters is one token, each other non-space character one.
 * A token's id is the FNV-1a hash of its text, so equal texts give equal ids wherever they occur
 * (prompt, earlier answer, tool call). Returns the number of tokens.
 */
export function scanTokens(text: string, sink: TokenSink | null): number {
  let n = 0;
  let h = 0;
  let start = -1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (isWordChar(c)) {
      if (start < 0) {
        n++;
        start = i;
        h = FNV_OFFSET;
      }
      h = Math.imul(h ^ c, FNV_PRIME);
      continue;
    }
    if (start >= 0) {
      sink?.push(h >>> 0, start, i);
      start = -1;
    }
    if (!isSpace(c)) {
      n++;
      sink?.push(Math.imul(FNV_OFFSET ^ c, FNV_PRIME) >>> 0, i, i + 1);
    }
  }
  if (start >= 0) sink?.push(h >>> 0, start, text.length);
  return n;
}

export function countTokens(text: string): number {
  return scanTokens(text, null);
}

/** The id of one token's text (equal to what scanTokens reports for it). */
export function tokenId(token: string): number {
  let h = FNV_OFFSET;
  for (let i = 0; i < token.length; i++) h = Math.imul(h ^ token.charCodeAt(i), FNV_PRIME);
  return h >>> 0;
}

/**
 * vLLM's prefix-cache keys: the token stream cut into blocks of `blockSize`, each block's key a hash
 * of every token up to its end (so a block only matches after the same prefix). Partial blocks
 * have no key; feeding more tokens (the answer, as it is generated) completes them.
 */
export class BlockHasher implements TokenSink {
  readonly blockSize: number;
  /** Keys of the full blocks so far, in order. */
  readonly blocks: number[] = [];
  private a = FNV_OFFSET;
  private b = 0x9747b28c;
  private n = 0;

  constructor(blockSize: number) {
    this.blockSize = blockSize;
  }

  // Two multiplicative lanes over ids that are already hashes: each step is a bijection of the state,
  // so sequences that differ in one token never share a key; 53 bits make other collisions negligible.
  push(id: number): void {
    const a = Math.imul(this.a ^ id, FNV_PRIME);
    const b = Math.imul(this.b ^ id, 0x5bd1e995);
    this.a = a;
    this.b = b;
    if (++this.n === this.blockSize) {
      this.n = 0;
      // 53 bits from two independent 32-bit lanes: a safe-integer Map key.
      this.blocks.push((a >>> 0) * 0x200000 + (b >>> 11));
    }
  }
}

/** One token of a fixed text (tool results, a tool call): its text with the whitespace before it. */
export interface Piece {
  raw: string;
  /** `raw` escaped for a JSON string. */
  esc: string;
  id: number;
  /** Offset just past this piece in the text (the next piece starts here). */
  end: number;
}

/** A fixed text cut into tokens; whitespace goes with the token after it, trailing spaces with the last. */
export function pieces(text: string): Piece[] {
  const out: Piece[] = [];
  let from = 0;
  scanTokens(text, {
    push(id, _start, end) {
      const raw = text.slice(from, end);
      out.push({ raw, esc: JSON.stringify(raw).slice(1, -1), id, end });
      from = end;
    },
  });
  const last = out.at(-1);
  if (last && from < text.length) {
    last.raw += text.slice(from);
    last.esc = JSON.stringify(last.raw).slice(1, -1);
    last.end = text.length;
  }
  return out;
}

// --- the chat template ---

/** Per-message overhead of the template: start marker, role, end marker, newline. */
export const CHAT_TOKENS_PER_MESSAGE = 4;
/** The assistant generation prompt appended after the last message: start marker and role. */
export const CHAT_GENERATION_PROMPT_TOKENS = 2;

const IM_START = tokenId('<|im_start|>');
const IM_END = tokenId('<|im_end|>');
const NEWLINE = tokenId('<|newline|>');
const ASSISTANT = tokenId('assistant');

/** The text of a message's content: a string, or the `text` parts of a content array. */
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    let s = '';
    for (const part of content) {
      if (part && typeof part === 'object' && typeof (part as { text?: unknown }).text === 'string')
        s += (s ? '\n' : '') + (part as { text: string }).text;
    }
    return s;
  }
  return '';
}

export interface ToolCallText {
  id: string;
  name: string;
  /** The arguments as the model wrote them (a JSON text, normally). */
  arguments: string;
}

/** One message as the template sees it, whichever API it came from. */
export interface ChatTurn {
  role: string;
  content: string;
  /** Calls an assistant message made. */
  toolCalls: readonly ToolCallText[];
  /** For a `tool` message: the call it answers. */
  toolCallId: string | null;
}

/** How a model writes a tool call (the Hermes format vLLM's `hermes` parser reads). */
export function toolCallText(name: string, args: string): string {
  return `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": ${args}}\n</tool_call>`;
}

export interface PromptInfo {
  tokens: number;
  /** Text the output is derived from. */
  text: string;
  /** The prompt's prefix-cache blocks (null when prefix caching is off). */
  hasher: BlockHasher | null;
}

/** The prompt of a conversation: each turn in the template, then the assistant generation prompt. */
export function renderChat(turns: readonly ChatTurn[], hasher: BlockHasher | null = null): PromptInfo {
  let tokens = CHAT_GENERATION_PROMPT_TOKENS;
  let text = '';
  for (const t of turns) {
    hasher?.push(IM_START);
    hasher?.push(tokenId(t.role));
    tokens += CHAT_TOKENS_PER_MESSAGE + scanTokens(t.content, hasher);
    text += `${t.role}\n${t.content}\n`;
    for (const call of t.toolCalls) {
      const written = toolCallText(call.name, call.arguments);
      tokens += scanTokens(written, hasher);
      text += written + '\n';
    }
    hasher?.push(IM_END);
    hasher?.push(NEWLINE);
  }
  hasher?.push(IM_START);
  hasher?.push(ASSISTANT);
  return { tokens, text, hasher };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Chat Completions messages as template turns (tool calls and tool results included). */
export function chatTurns(messages: readonly Record<string, unknown>[]): ChatTurn[] {
  return messages.map((m) => {
    const calls = Array.isArray(m.tool_calls) ? m.tool_calls.filter(isObject) : [];
    return {
      role: typeof m.role === 'string' ? m.role : '',
      content: contentText(m.content),
      toolCalls: calls.map((c) => {
        const fn = isObject(c.function) ? c.function : {};
        return {
          id: typeof c.id === 'string' ? c.id : '',
          name: typeof fn.name === 'string' ? fn.name : '',
          arguments: typeof fn.arguments === 'string' ? fn.arguments : '',
        };
      }),
      toolCallId: typeof m.tool_call_id === 'string' ? m.tool_call_id : null,
    };
  });
}

export function chatPrompt(
  messages: readonly Record<string, unknown>[],
  hasher: BlockHasher | null = null,
): PromptInfo {
  return renderChat(chatTurns(messages), hasher);
}

export function completionPrompt(prompt: string, hasher: BlockHasher | null = null): PromptInfo {
  return { tokens: scanTokens(prompt, hasher), text: prompt, hasher };
}

/** A prompt given as token ids: the ids are the tokens. */
export function tokenIdsPrompt(ids: readonly number[], hasher: BlockHasher | null = null): PromptInfo {
  if (hasher) for (const id of ids) hasher.push(id >>> 0);
  return { tokens: ids.length, text: ids.join(' '), hasher };
}

/** FNV-1a over UTF-16 code units, mixed with the seed. */
export function seedFor(text: string, seed: number | null): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  if (seed !== null) {
    h ^= Math.imul(seed | 0, 0x9e3779b1);
    h ^= Math.imul(Math.floor(seed / 0x100000000) | 0, 0x85ebca6b);
  }
  return h >>> 0;
}

const WORDS = (
  'the of and to in is that it for on with as was at by from this be are or have an they which one ' +
  'you were all we when there can more if out so what time up about into than them only some could ' +
  'model token engine stream request latency cluster node batch cache memory kernel tensor layer ' +
  'weight graph queue signal value state phase replica endpoint proxy service metric scale wake ' +
  'sleep build ready serve route policy budget window buffer socket frame chunk event record ' +
  'quiet river stone light green north early simple steady clear small bright open calm careful ' +
  'runs holds waits moves reads writes keeps turns finds shows makes takes gives brings sends ' +
  'across between within under over after before during without around through along beside'
)
  .split(' ')
  .filter(Boolean);

function capitalise(w: string): string {
  return w.charAt(0).toUpperCase() + w.slice(1);
}

// Token texts and ids precomputed once, so generating a token allocates nothing.
const SPACED = WORDS.map((w) => ' ' + w);
const SPACED_CAPITAL = WORDS.map((w) => ' ' + capitalise(w));
const FIRST = WORDS.map(capitalise);
const WORD_IDS = WORDS.map(tokenId);
const CAPITAL_IDS = WORDS.map((w) => tokenId(capitalise(w)));
const PERIOD = '.';
const COMMA = ',';
const PERIOD_ID = tokenId(PERIOD);
const COMMA_ID = tokenId(COMMA);

/**
 * A seeded generator of token texts (mulberry32 PRNG); sentences of 6-15 words, some commas. With
 * fixed pieces it says those first (tool results, a tool call), then goes on generating. Each
 * next() leaves the token's `id` (for prefix-cache hashing) and its unescaped text in `raw`.
 */
export class TokenGenerator {
  /** Id of the token next() returned last. */
  id = 0;
  /** Unescaped text of the token next() returned last. */
  raw = '';
  private state: number;
  private index = 0;
  private sentenceLeft = 0;
  private capitalNext = true;
  private lastWasPunct = true;
  private readonly fixed: readonly Piece[] | null;
  private fixedAt = 0;

  constructor(seed: number, fixed: readonly Piece[] | null = null) {
    this.state = seed >>> 0;
    this.fixed = fixed && fixed.length > 0 ? fixed : null;
    if (this.fixed) this.index = 1; // generated text continues a sentence: no bare first word
  }

  private rand(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) | 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  /** The next token's text, escaped for a JSON string (generated words need no escaping). */
  next(): string {
    if (this.fixed !== null && this.fixedAt < this.fixed.length) {
      const p = this.fixed[this.fixedAt++]!;
      this.id = p.id;
      this.raw = p.raw;
      return p.esc;
    }
    const t = this.word();
    this.raw = t;
    return t;
  }

  private word(): string {
    const r = this.rand();
    const first = this.index++ === 0;
    if (!this.lastWasPunct && this.sentenceLeft <= 0) {
      this.capitalNext = true;
      this.lastWasPunct = true;
      this.id = PERIOD_ID;
      return PERIOD;
    }
    if (!this.lastWasPunct && this.sentenceLeft > 2 && r % 17 === 0) {
      this.lastWasPunct = true;
      this.id = COMMA_ID;
      return COMMA;
    }
    if (this.capitalNext) this.sentenceLeft = 6 + ((r >>> 8) % 10);
    this.sentenceLeft--;
    this.lastWasPunct = false;
    const w = (r >>> 4) % WORDS.length;
    if (first) {
      this.capitalNext = false;
      this.id = CAPITAL_IDS[w]!;
      return FIRST[w]!;
    }
    if (this.capitalNext) {
      this.capitalNext = false;
      this.id = CAPITAL_IDS[w]!;
      return SPACED_CAPITAL[w]!;
    }
    this.id = WORD_IDS[w]!;
    return SPACED[w]!;
  }
}

/** The whole output of `n` tokens at once (non-streaming responses). */
export function generateText(seed: number, n: number): string {
  const g = new TokenGenerator(seed);
  let s = '';
  for (let i = 0; i < n; i++) s += g.next();
  return s;
}
