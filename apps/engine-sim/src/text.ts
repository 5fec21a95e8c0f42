// Deterministic stand-ins for a tokenizer and a model: stable token counts for `usage`, and output text
// that depends only on (prompt, seed) so tests can assert content.

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

/** Tokens of a text: each run of word characters is one token, each other non-space character one. */
export function countTokens(text: string): number {
  let n = 0;
  let inWord = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (isWordChar(c)) {
      if (!inWord) n++;
      inWord = true;
    } else {
      inWord = false;
      if (!isSpace(c)) n++;
    }
  }
  return n;
}

/** Per-message overhead of a typical chat template (role markers, separators). */
export const CHAT_TOKENS_PER_MESSAGE = 4;
/** The assistant generation prompt appended after the last message. */
export const CHAT_GENERATION_PROMPT_TOKENS = 2;

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

export interface PromptInfo {
  tokens: number;
  /** Text the output is derived from. */
  text: string;
}

export function chatPrompt(messages: readonly { role?: unknown; content?: unknown }[]): PromptInfo {
  let tokens = CHAT_GENERATION_PROMPT_TOKENS;
  let text = '';
  for (const m of messages) {
    const c = contentText(m.content);
    tokens += CHAT_TOKENS_PER_MESSAGE + countTokens(c);
    text += `${typeof m.role === 'string' ? m.role : ''}\n${c}\n`;
  }
  return { tokens, text };
}

export function completionPrompt(prompt: string): PromptInfo {
  return { tokens: countTokens(prompt), text: prompt };
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

// Token texts precomputed once, so generating a token allocates nothing.
const SPACED = WORDS.map((w) => ' ' + w);
const SPACED_CAPITAL = WORDS.map((w) => ' ' + capitalise(w));
const FIRST = WORDS.map(capitalise);
const PERIOD = '.';
const COMMA = ',';

/** A seeded generator of token texts (mulberry32 PRNG); sentences of 6-15 words, some commas. */
export class TokenGenerator {
  private state: number;
  private index = 0;
  private sentenceLeft = 0;
  private capitalNext = true;
  private lastWasPunct = true;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  private rand(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) | 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  next(): string {
    const r = this.rand();
    const first = this.index++ === 0;
    if (!this.lastWasPunct && this.sentenceLeft <= 0) {
      this.capitalNext = true;
      this.lastWasPunct = true;
      return PERIOD;
    }
    if (!this.lastWasPunct && this.sentenceLeft > 2 && r % 17 === 0) {
      this.lastWasPunct = true;
      return COMMA;
    }
    if (this.capitalNext) this.sentenceLeft = 6 + ((r >>> 8) % 10);
    this.sentenceLeft--;
    this.lastWasPunct = false;
    const w = (r >>> 4) % WORDS.length;
    if (first) {
      this.capitalNext = false;
      return FIRST[w]!;
    }
    if (this.capitalNext) {
      this.capitalNext = false;
      return SPACED_CAPITAL[w]!;
    }
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
