// The shape the code keeps (issue 31). No source file over 450 lines and no function body over 250:
// past that, a file is two files and a factory closure is a module with its functions hidden inside
// it. apps/api/src is one folder per product over a kernel (platform/) and HTTP plumbing (http/),
// with one front door (inference/); its imports point down, and Prisma is imported only by
// repository modules.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = path.resolve(import.meta.dirname, '../../..');
const apiSrc = path.join(root, 'apps/api/src');
const MAX_FILE_LINES = 450;
const MAX_FUNCTION_LINES = 250;

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules' && entry.name !== 'generated') out.push(...sourceFiles(file));
    } else if (/\.(ts|tsx|mts|mjs)$/.test(entry.name) && !/\.d\.m?ts$/.test(entry.name)) out.push(file);
  }
  return out;
}

/** The packages whose sources the limits hold for: every app's src/, the operator's and the CRDs'. */
const packages = [
  ...readdirSync(path.join(root, 'apps'))
    .map((app) => `apps/${app}/src`)
    .filter((src) => statSync(path.join(root, src), { throwIfNoEntry: false })?.isDirectory()),
  'operator/src',
  'crds/src',
];

/** What is over the limits in one file: `file: N lines`, `file:line name: N-line function body`. */
function oversized(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const rel = path.relative(root, file);
  const out: string[] = [];
  const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
  if (lines > MAX_FILE_LINES) out.push(`${rel}: ${lines} lines`);
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const line = (pos: number) => sf.getLineAndCharacterOfPosition(pos).line;
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const body = node.body as ts.Node;
      const length = line(body.getEnd()) - line(body.getStart(sf));
      if (length > MAX_FUNCTION_LINES) {
        const name = (node as { name?: ts.Node }).name?.getText(sf) ?? '(anonymous)';
        out.push(`${rel}:${line(body.getStart(sf)) + 1} ${name}: ${length}-line function body`);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

describe('source size', () => {
  it.each(packages)(
    `%s: no source file over ${MAX_FILE_LINES} lines, no function body over ${MAX_FUNCTION_LINES}`,
    (pkg) => {
      expect(sourceFiles(path.join(root, pkg)).flatMap(oversized)).toEqual([]);
    },
  );
});

/** Which folders of apps/api/src each folder may import from: the arrows point down. */
const MAY_IMPORT: Record<string, readonly string[]> = {
  platform: [],
  http: ['platform'],
  accounts: ['platform', 'http'],
  billing: ['platform', 'http'],
  dedicated: ['platform', 'http', 'accounts', 'billing'],
  elastic: ['platform', 'http', 'billing', 'dedicated'],
  tools: ['platform', 'http', 'accounts', 'billing', 'dedicated', 'elastic'],
  olympus: ['platform', 'http', 'elastic', 'tools'],
  inference: ['platform', 'http', 'dedicated', 'elastic', 'tools', 'olympus'],
  chronos: [
    'platform',
    'http',
    'accounts',
    'billing',
    'dedicated',
    'elastic',
    'tools',
    'olympus',
    'inference',
  ],
};

/** The relative imports of a file, resolved. */
function imports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)].map((m) =>
    path.resolve(path.dirname(file), m[1]!),
  );
}

const folderOf = (file: string) => {
  const parts = path.relative(apiSrc, file).split(path.sep);
  return parts.length > 1 ? parts[0]! : '(composition root)';
};

describe('apps/api/src', () => {
  it('is one folder per product, over platform/ and http/, with one front door (inference/)', () => {
    const folders = readdirSync(apiSrc, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name)
      .sort();
    expect(folders).toEqual(Object.keys(MAY_IMPORT).sort());
  });

  it('imports point down: no folder imports one above it, and only the composition root imports all', () => {
    const upward = sourceFiles(apiSrc).flatMap((file) => {
      const from = folderOf(file);
      const allowed = MAY_IMPORT[from];
      if (!allowed) return [];
      return imports(file)
        .filter((target) => target.startsWith(apiSrc + path.sep))
        .map((target) => folderOf(target))
        .filter((to) => to !== from && !allowed.includes(to))
        .map((to) => `${path.relative(apiSrc, file)} imports ${to}/`);
    });
    expect([...new Set(upward)]).toEqual([]);
  });

  it('imports Prisma only in repository modules', () => {
    const outside = sourceFiles(apiSrc)
      .filter((file) => !/repository\.ts$/.test(file))
      .filter((file) =>
        /import[^;]*\b(?:Prisma|PrismaClient)\b[^;]*from '@berth\/db'/.test(readFileSync(file, 'utf8')),
      )
      .map((file) => path.relative(apiSrc, file));
    expect(outside).toEqual([]);
  });
});
