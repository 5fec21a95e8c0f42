// The module-graph walk the image tests use: what counts as a runtime import, and what it reports
// as missing in a small image tree.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { moduleGraph, runtimeImports, urlReferences } from './graph.ts';

describe('runtimeImports', () => {
  it('keeps value imports, re-exports and literal dynamic imports; drops what type stripping erases', () => {
    const src = `
      import a from './a.ts';
      import { b, type B } from './b.ts';
      import type { C } from './c.ts';
      import './side-effect.ts';
      export { d } from './d.ts';
      export type { E } from './e.ts';
      export * from './f.ts';
      const g = await import('./g.ts');
      const h = await import(someVariable);
      import { type OnlyType } from './h.ts';
    `;
    expect(runtimeImports(src)).toEqual([
      './a.ts',
      './b.ts',
      './side-effect.ts',
      './d.ts',
      './f.ts',
      './g.ts',
      // Only the specifier is a type: Node's stripping keeps `import {} from`, so the module loads.
      './h.ts',
    ]);
  });
});

describe('moduleGraph', () => {
  let root: string;
  const file = (path: string, text: string) => {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  };
  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), 'berth-graph-'));
    const outside = mkdtempSync(join(tmpdir(), 'berth-graph-pkgs-'));
    mkdirSync(join(outside, 'zod'), { recursive: true });
    file('app/svc/package.json', JSON.stringify({ name: '@x/svc', exports: { '.': './src/index.ts' } }));
    file(
      'app/svc/src/index.ts',
      `import { z } from 'zod';\nexport const cli = new URL('./cli.ts', import.meta.url);`,
    );
    file('app/svc/src/cli.ts', '');
    file(
      'app/api/src/main.ts',
      [
        "import { readFileSync } from 'node:fs';",
        "import path from 'path';",
        "import { svc } from '@x/svc';",
        "import { helper } from './helper.ts';",
        "import { gone } from './gone.ts';",
        "import { expect } from 'vitest';",
        "import type { Types } from 'only-types';",
      ].join('\n'),
    );
    file('app/api/src/helper.ts', "export * from '../../svc/src/index.ts';");
    mkdirSync(join(root, 'app/node_modules/@x'), { recursive: true });
    symlinkSync('../../svc', join(root, 'app/node_modules/@x/svc'));
    symlinkSync(join(outside, 'zod'), join(root, 'app/node_modules/zod'));
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('follows relative imports and workspace links inside the image, records registry packages, reports the rest', () => {
    const g = moduleGraph(root, '/app/api/src/main.ts');
    expect(g.files).toEqual(['/app/api/src/main.ts', '/app/svc/src/index.ts', '/app/api/src/helper.ts']);
    expect([...g.packages]).toEqual(['zod']);
    expect(g.missing).toEqual([
      '/app/api/src/main.ts: ./gone.ts (/app/api/src/gone.ts is not in the image)',
      '/app/api/src/main.ts: vitest (no node_modules/vitest on the way up; a dev-only dependency?)',
    ]);
    expect(urlReferences(root, g.files)).toEqual([
      { file: '/app/svc/src/index.ts', target: '/app/svc/src/cli.ts' },
    ]);
  });

  it('reports an entry point that is not there', () => {
    expect(moduleGraph(root, '/app/nope.ts').missing).toEqual([
      'entry point /app/nope.ts is not in the image',
    ]);
  });
});
