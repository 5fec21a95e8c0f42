// The module graph an entry point loads at run time, resolved inside an image's filesystem the way
// Node resolves it: relative specifiers to files, bare ones through node_modules (workspace links
// are followed into the image's own sources, registry packages are recorded, not walked). Type-only
// imports are skipped: Node's type stripping erases them.
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join, posix, relative } from 'node:path';
import ts from 'typescript';

export interface ModuleGraph {
  /** Image paths of the project's own modules loaded, entry first. */
  files: string[];
  /** Registry packages imported by those modules. */
  packages: Set<string>;
  /** What would fail at run time: `<importer>: <specifier> (why)`. */
  missing: string[];
}

const builtins = new Set(builtinModules);

/** Runtime module specifiers of one TypeScript/JavaScript source (no type-only imports). */
export function runtimeImports(source: string, fileName = 'x.ts'): string[] {
  const sf = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const specs: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isImportDeclaration(node) && !node.importClause?.isTypeOnly) {
      specs.push((node.moduleSpecifier as ts.StringLiteral).text);
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier && !node.isTypeOnly) {
      specs.push((node.moduleSpecifier as ts.StringLiteral).text);
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] &&
      ts.isStringLiteralLike(node.arguments[0])
    ) {
      specs.push(node.arguments[0].text);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return specs;
}

/** Walks the graph from `entry` (an image path such as /app/apps/api/src/main.ts) inside `root`. */
export function moduleGraph(root: string, entry: string): ModuleGraph {
  const graph: ModuleGraph = { files: [], packages: new Set(), missing: [] };
  const queue = [entry];
  const seen = new Set<string>();
  if (!existsSync(join(root, entry))) graph.missing.push(`entry point ${entry} is not in the image`);
  while (queue.length) {
    const file = queue.shift()!;
    if (seen.has(file) || !existsSync(join(root, file))) continue;
    seen.add(file);
    graph.files.push(file);
    if (!/\.(ts|mts|js|mjs)$/.test(file)) continue;
    for (const spec of runtimeImports(readFileSync(join(root, file), 'utf8'), file)) {
      if (spec.startsWith('node:') || builtins.has(spec)) continue;
      const resolved = spec.startsWith('.')
        ? posix.resolve(posix.dirname(file), spec)
        : resolveBare(root, file, spec, graph);
      if (resolved === undefined) continue;
      if (!existsSync(join(root, resolved)))
        graph.missing.push(`${file}: ${spec} (${resolved} is not in the image)`);
      else queue.push(resolved);
    }
  }
  return graph;
}

/** A bare specifier from `from`: a workspace module inside the image, or a registry package. */
function resolveBare(root: string, from: string, spec: string, graph: ModuleGraph): string | undefined {
  const parts = spec.split('/');
  const name = spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
  const subpath = parts.slice(spec.startsWith('@') ? 2 : 1).join('/');
  for (let dir = posix.dirname(from); ; dir = posix.dirname(dir)) {
    const candidate = join(root, dir, 'node_modules', name);
    if (existsSync(candidate)) {
      const real = realpathSync(candidate);
      const inside = relative(realpathSync(root), real);
      if (inside.startsWith('..')) {
        graph.packages.add(name);
        return undefined;
      }
      // A workspace linked into the image: follow its package.json "exports".
      const pkg = JSON.parse(readFileSync(join(real, 'package.json'), 'utf8')) as { exports?: unknown };
      const exports =
        typeof pkg.exports === 'string'
          ? { '.': pkg.exports }
          : ((pkg.exports ?? {}) as Record<string, string>);
      const target = exports[subpath ? `./${subpath}` : '.'];
      if (typeof target !== 'string') {
        graph.missing.push(`${from}: ${spec} (not exported by ${name})`);
        return undefined;
      }
      return posix.join('/', inside, target);
    }
    if (dir === '/') break;
  }
  graph.missing.push(`${from}: ${spec} (no node_modules/${name} on the way up; a dev-only dependency?)`);
  return undefined;
}

/** Files an image's sources name at run time with `new URL('<relative>', import.meta.url)`. */
export function urlReferences(root: string, files: string[]): { file: string; target: string }[] {
  const refs: { file: string; target: string }[] = [];
  for (const file of files) {
    const text = readFileSync(join(root, file), 'utf8');
    for (const m of text.matchAll(/new URL\(\s*'(\.{1,2}\/[^']+)'\s*,\s*import\.meta\.url\s*\)/g))
      refs.push({ file, target: posix.resolve(posix.dirname(file), m[1]!) });
  }
  return refs;
}
