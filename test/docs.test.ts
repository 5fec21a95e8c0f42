// The documentation stays readable and connected: the README and BENCHMARKS.md stay short (the
// manuals and the dated history live in docs/), and every relative link in them and in docs/ leads
// somewhere — a file that exists and, for `file.md#anchor`, a heading of that file (GitHub's anchors).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

const lines = (file: string) => readFileSync(path.join(root, file), 'utf8').trimEnd().split('\n').length;

/** The Markdown files whose links are checked, relative to the repository root. */
function checkedFiles(): string[] {
  const docs = readdirSync(path.join(root, 'docs'), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.md'))
    .map((f) => path.join('docs', f));
  return ['README.md', 'BENCHMARKS.md', ...docs.sort()];
}

/** The text outside fenced code blocks, line by line (fenced lines become empty, so numbers stay). */
function prose(markdown: string): string[] {
  let fence: string | undefined;
  return markdown.split('\n').map((line) => {
    const m = /^\s*(`{3,}|~{3,})/.exec(line);
    if (fence) {
      if (m && m[1]!.startsWith(fence)) fence = undefined;
      return '';
    }
    if (m) {
      fence = m[1]!;
      return '';
    }
    return line;
  });
}

/** GitHub's anchor for a heading: its text without markup, lowercased, punctuation removed, spaces to `-`. */
function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images: their text
    .replace(/<[^>]+>/g, ''); // inline HTML; emphasis and code marks go with the punctuation below
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor a Markdown file's headings make, duplicates numbered as GitHub numbers them. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of prose(markdown)) {
    const m = /^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$/.exec(line);
    if (!m) continue;
    const base = slug(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

interface Link {
  file: string;
  line: number;
  target: string;
}

/** The relative links of a Markdown file (inline links and images, outside code). */
function relativeLinks(file: string): Link[] {
  const text = readFileSync(path.join(root, file), 'utf8');
  const links: Link[] = [];
  prose(text).forEach((line, i) => {
    const outsideCode = line.replace(/(`+)[^`]*?\1/g, '');
    for (const m of outsideCode.matchAll(
      /!?\[(?:[^\]]|\][^(])*?\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g,
    )) {
      const target = m[1]!;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//')) continue; // https:, mailto:
      links.push({ file, line: i + 1, target });
    }
  });
  return links;
}

function brokenLinks(): string[] {
  const anchorCache = new Map<string, Set<string>>();
  const anchorsOf = (abs: string) => {
    if (!anchorCache.has(abs)) anchorCache.set(abs, anchors(readFileSync(abs, 'utf8')));
    return anchorCache.get(abs)!;
  };
  const broken: string[] = [];
  for (const file of checkedFiles())
    for (const link of relativeLinks(file)) {
      const [rawPath, anchor] = link.target.split('#', 2) as [string, string | undefined];
      const where = `${link.file}:${link.line}: ${link.target}`;
      if (rawPath.startsWith('/')) {
        broken.push(`${where} (an absolute path: GitHub resolves it against the site, not the repository)`);
        continue;
      }
      const abs = rawPath
        ? path.resolve(path.dirname(path.join(root, link.file)), decodeURIComponent(rawPath))
        : path.join(root, link.file);
      if (!existsSync(abs)) {
        broken.push(`${where} (no such file)`);
        continue;
      }
      if (anchor !== undefined && abs.endsWith('.md') && statSync(abs).isFile()) {
        if (!anchorsOf(abs).has(decodeURIComponent(anchor)))
          broken.push(`${where} (no heading with that anchor in ${path.relative(root, abs)})`);
      }
    }
  return broken;
}

describe('documentation', () => {
  it('keeps the README within 400 lines and BENCHMARKS.md within 500', () => {
    expect(lines('README.md')).toBeLessThanOrEqual(400);
    expect(lines('BENCHMARKS.md')).toBeLessThanOrEqual(500);
  });

  it('makes anchors as GitHub does', () => {
    expect(slug('Chronos (scheduled runs)')).toBe('chronos-scheduled-runs');
    expect(slug('Command-line tool (`berth`)')).toBe('command-line-tool-berth');
    expect(slug('A `DedicatedEndpoint` manifest')).toBe('a-dedicatedendpoint-manifest');
    expect(slug('Elastic inference: overhead and billing on vs off (issues 12 and 13)')).toBe(
      'elastic-inference-overhead-and-billing-on-vs-off-issues-12-and-13',
    );
    expect(slug('Runs 09:18 – 09:56 UTC')).toBe('runs-0918--0956-utc');
    expect(slug('**Bold** and [a link](x.md)')).toBe('bold-and-a-link');
    expect(slug('ENGINE_LOAD_SAMPLE_MS')).toBe('engine_load_sample_ms');
    expect([...anchors('# A\n```sh\n# not a heading\n```\n## A\n')]).toEqual(['a', 'a-1']);
  });

  it('has relative links that lead to existing files and headings', () => {
    expect(checkedFiles()).toContain('README.md');
    expect(brokenLinks()).toEqual([]);
  });
});
