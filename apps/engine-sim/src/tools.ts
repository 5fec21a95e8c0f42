// Deterministic tool use. A real model decides from the prompt whether to call a tool; the simulator
// follows a script written into the prompt instead, so a managed tool loop is scriptable and ends:
//
//   the last user message holds lines `call <name> <JSON arguments>` (arguments optional, `{}`);
//   each turn makes the next call not yet made since that message (counting the assistant's
//   tool_calls after it); when the script is done and the conversation ends with tool results,
//   the answer is text that quotes those results.
//
// tool_choice is honoured: "none" never calls, a named function is always called (with the next
// scripted arguments when the script names it, else `{}`), "required" calls the first tool when the
// script has nothing left.
import { toolCallText, type ChatTurn } from './text.ts';

export type ToolChoice = 'auto' | 'none' | 'required' | { name: string };

export type ToolPlan =
  /** Answer normally. */
  | { type: 'none' }
  /** Answer with this text, which quotes the tool results. */
  | { type: 'results'; text: string }
  /** Call this tool. */
  | { type: 'call'; name: string; arguments: string };

export interface ScriptedCall {
  name: string;
  /** The arguments as the model will write them. */
  arguments: string;
}

/**
 * Python's `json.dumps` layout (`", "` and `": "`), as vLLM's Hermes parser re-serialises the
 * arguments a model wrote.
 */
export function pythonJson(v: unknown): string {
  if (Array.isArray(v)) return '[' + v.map(pythonJson).join(', ') + ']';
  if (typeof v === 'object' && v !== null)
    return (
      '{' +
      Object.entries(v)
        .map(([k, x]) => `${JSON.stringify(k)}: ${pythonJson(x)}`)
        .join(', ') +
      '}'
    );
  return JSON.stringify(v) ?? 'null';
}

const CALL_LINE = /^\s*call\s+([A-Za-z0-9_.:-]+)(?:\s+(.*?))?\s*$/;

/** The `call <name> <arguments>` lines of a message, in order. Arguments that are not JSON are kept as written. */
export function parseCallScript(text: string): ScriptedCall[] {
  const calls: ScriptedCall[] = [];
  for (const line of text.split('\n')) {
    const m = CALL_LINE.exec(line);
    if (!m) continue;
    const written = m[2] ?? '';
    let args = '{}';
    if (written !== '') {
      try {
        args = pythonJson(JSON.parse(written));
      } catch {
        args = written; // a model can write broken JSON; pass it on as it is
      }
    }
    calls.push({ name: m[1]!, arguments: args });
  }
  return calls;
}

/** What the model does next in this conversation, given the tools it was offered. */
export function planToolTurn(
  turns: readonly ChatTurn[],
  toolNames: readonly string[],
  choice: ToolChoice,
): ToolPlan {
  let lastUser = -1;
  for (let i = turns.length - 1; i >= 0; i--)
    if (turns[i]!.role === 'user') {
      lastUser = i;
      break;
    }
  const after = turns.slice(lastUser + 1);

  if (toolNames.length > 0 && choice !== 'none') {
    const script = lastUser >= 0 ? parseCallScript(turns[lastUser]!.content) : [];
    const made = after.reduce((n, t) => n + (t.role === 'assistant' ? t.toolCalls.length : 0), 0);
    const next = script[made];
    if (typeof choice === 'object') {
      const args = next && next.name === choice.name ? next.arguments : '{}';
      return { type: 'call', name: choice.name, arguments: args };
    }
    if (next) return { type: 'call', name: next.name, arguments: next.arguments };
    if (choice === 'required') return { type: 'call', name: toolNames[0]!, arguments: '{}' };
  }

  if (turns.at(-1)?.role === 'tool') return { type: 'results', text: resultsText(turns, after) };
  return { type: 'none' };
}

function resultsText(turns: readonly ChatTurn[], after: readonly ChatTurn[]): string {
  const names = new Map<string, string>();
  for (const t of turns) for (const c of t.toolCalls) names.set(c.id, c.name);
  const parts = after
    .filter((t) => t.role === 'tool')
    .map((t) => `${(t.toolCallId !== null && names.get(t.toolCallId)) || 'tool'}: ${t.content}`);
  return `Tool results: ${parts.join('; ')}`;
}

/** Where the name and the arguments sit in a written tool call (for streaming deltas). */
export interface WrittenCall {
  text: string;
  /** Offset just past the name's closing quote. */
  nameEnd: number;
  argsStart: number;
  argsEnd: number;
}

export function writtenCall(name: string, args: string): WrittenCall {
  const text = toolCallText(name, args);
  const nameEnd = text.indexOf(JSON.stringify(name)) + JSON.stringify(name).length;
  const argsStart = text.length - `}\n</tool_call>`.length - args.length;
  return { text, nameEnd, argsStart, argsEnd: argsStart + args.length };
}
