// Reading Dockerfiles and .dockerignore files the way BuildKit does, for tests that check the image
// builds without a Docker engine (none on these machines). Pure functions; no I/O.
import { posix } from 'node:path';

export interface Instruction {
  /** Upper-case keyword: FROM, COPY, RUN, … */
  keyword: string;
  /** Flags before the arguments (`--from=build` → { from: 'build' }). */
  flags: Record<string, string>;
  /** The arguments after the flags, as written (continuations joined with a space). */
  args: string;
  /** Exec form (`["node", "main.ts"]`) parsed, when the arguments are a JSON array. */
  exec?: string[];
  /** 1-based line of the keyword. */
  line: number;
}

/** Instructions of a Dockerfile: comments and parser directives dropped, `\` continuations joined. */
export function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const first = lines[i]!.trim();
    if (!first || first.startsWith('#')) continue;
    const start = i + 1;
    let joined = '';
    let line = lines[i]!;
    for (;;) {
      const trimmed = line.trimEnd();
      if (trimmed.endsWith('\\') && i + 1 < lines.length) {
        joined += trimmed.slice(0, -1);
        // Comment lines inside a continued instruction are dropped, as BuildKit does.
        do i++;
        while (i < lines.length && lines[i]!.trim().startsWith('#'));
        line = lines[i] ?? '';
      } else {
        joined += trimmed;
        break;
      }
    }
    const m = /^\s*(\S+)\s*(.*)$/s.exec(joined)!;
    let rest = m[2]!.trim();
    const flags: Record<string, string> = {};
    for (let f = /^--([a-z-]+)(?:=(\S*))?\s*/.exec(rest); f; f = /^--([a-z-]+)(?:=(\S*))?\s*/.exec(rest)) {
      flags[f[1]!] = f[2] ?? 'true';
      rest = rest.slice(f[0].length);
    }
    const instruction: Instruction = { keyword: m[1]!.toUpperCase(), flags, args: rest, line: start };
    if (rest.startsWith('[')) {
      try {
        const parsed: unknown = JSON.parse(rest);
        if (Array.isArray(parsed) && parsed.every((s) => typeof s === 'string')) instruction.exec = parsed;
      } catch {
        // Not JSON: shell form that happens to start with "[".
      }
    }
    out.push(instruction);
  }
  return out;
}

export interface Stage {
  /** `AS name`, or the stage's index as a string. */
  name: string;
  /** Base image after ARG substitution, or the name of an earlier stage. */
  base: string;
  /** Instructions after FROM. */
  instructions: Instruction[];
  line: number;
}

/** Build stages, with `${ARG}` in FROM lines replaced by the defaults of the ARGs before the first FROM. */
export function stagesOf(instructions: Instruction[], buildArgs: Record<string, string> = {}): Stage[] {
  const globals: Record<string, string> = {};
  const stages: Stage[] = [];
  for (const ins of instructions) {
    if (ins.keyword === 'FROM') {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args);
      if (!m) throw new Error(`line ${ins.line}: cannot read FROM ${ins.args}`);
      const base = substitute(m[1]!, { ...globals, ...buildArgs }, ins.line);
      stages.push({ name: m[2] ?? String(stages.length), base, instructions: [], line: ins.line });
    } else if (stages.length === 0) {
      if (ins.keyword !== 'ARG') throw new Error(`line ${ins.line}: ${ins.keyword} before the first FROM`);
      const m = /^([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$/.exec(ins.args);
      if (!m) throw new Error(`line ${ins.line}: cannot read ARG ${ins.args}`);
      globals[m[1]!] = m[2] ?? '';
    } else {
      stages.at(-1)!.instructions.push(ins);
    }
  }
  return stages;
}

function substitute(s: string, vars: Record<string, string>, line: number): string {
  return s.replace(
    /\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)/g,
    (_, a?: string, b?: string) => {
      const name = (a ?? b)!;
      if (!(name in vars)) throw new Error(`line ${line}: \${${name}} has no value`);
      return vars[name]!;
    },
  );
}

/** The last instruction of a keyword in a stage (ENTRYPOINT, CMD, USER, WORKDIR: the last one wins). */
export function last(stage: Stage, keyword: string): Instruction | undefined {
  return stage.instructions.filter((i) => i.keyword === keyword).at(-1);
}

/**
 * A .dockerignore as BuildKit applies it (moby/patternmatcher): patterns cleaned and matched in
 * order, `!` re-includes, a pattern matching a parent directory matches everything under it.
 * Returns whether a context-relative path (forward slashes) is EXCLUDED from the build context.
 */
export function dockerignore(text: string | undefined): (path: string) => boolean {
  const patterns = (text ?? '')
    .replace(/^\uFEFF/, '')
    .split('\n')
    .filter((l) => !l.startsWith('#'))
    .map((l) => l.trim())
    .filter(Boolean)
    .map((l) => {
      const exclusion = l.startsWith('!');
      let p = exclusion ? l.slice(1).trim() : l;
      p = clean(p);
      if (p.length > 1 && p.startsWith('/')) p = p.slice(1);
      return { exclusion, match: compile(p), dirs: p.split('/').length };
    });
  return (file: string) => {
    const parts = clean(file).split('/');
    let matched = false;
    for (const pattern of patterns) {
      if (pattern.exclusion !== matched) continue;
      let match = pattern.match(parts.join('/'));
      for (let i = 1; !match && i < parts.length; i++) match = pattern.match(parts.slice(0, i).join('/'));
      if (match) matched = !pattern.exclusion;
    }
    return matched;
  };
}

/** Go's filepath.Clean for slash paths: no trailing slash, no `.` segments, `..` resolved. */
function clean(p: string): string {
  const c = posix.normalize(p);
  return c.length > 1 && c.endsWith('/') ? c.slice(0, -1) : c;
}

/** A pattern as patternmatcher compiles it: `*` and `?` within a segment, `**` across segments. */
function compile(pattern: string): (path: string) => boolean {
  let re = '^';
  for (let i = 0; i < pattern.length; i++) {
    const ch = pattern[i]!;
    if (ch === '*') {
      if (pattern[i + 1] === '*') {
        i++;
        if (pattern[i + 1] === '/') i++;
        re += i + 1 >= pattern.length ? '.*' : '(.*/)?';
      } else {
        re += '[^/]*';
      }
    } else if (ch === '?') re += '[^/]';
    else if ('.+()|{}$^'.includes(ch)) re += '\\' + ch;
    else if (ch === '\\' && i + 1 < pattern.length) re += '\\' + pattern[++i];
    else re += ch;
  }
  const regexp = new RegExp(re + '$');
  return (path) => regexp.test(path);
}
